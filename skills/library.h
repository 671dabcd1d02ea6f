/* SPDX-License-Identifier: MIT */
/*
 * library.h - copying the skills.path library into a sandbox's skills/.
 */
#ifndef SBX_SKILLS_LIBRARY_H
#define SBX_SKILLS_LIBRARY_H

#include <sys/types.h>

/* Copy the tree at library into dest (an existing directory), files and
 * directories owned by uid:gid, overwriting what has the same path.
 * 0, or -1 when something was not copied (each logged; the rest is). */
int skills_library_copy(const char *library, const char *dest, uid_t uid, gid_t gid);

#endif
