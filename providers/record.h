/* SPDX-License-Identifier: MIT */
/*
 * record.h - the JSON records providers keep on the host: a box's record in
 * its thread directory (what proves a container or remote sandbox is ours
 * after a restart: docker.json, aio-remote.json, opensandbox.json) and a
 * job's record in its job directory (what a reattach needs: aio.json,
 * opensandbox.json).  One writer, so every record is written the same way:
 * compact JSON, atomically (a crash leaves the old record or the new one),
 * mode 0600.
 *
 * Any thread; no lock (a record belongs to the one box or job that writes it).
 */
#ifndef SBX_RECORD_H
#define SBX_RECORD_H

#include <jansson.h>

/* rec into dir/name.  0, or -1 with errno. */
int record_save(const char *dir, const char *name, const json_t *rec);

/* dir/name's JSON as a new reference; NULL when there is none or it is not
 * JSON. */
json_t *record_load(const char *dir, const char *name);

/* dir/name removed (a missing one is no error). */
void record_remove(const char *dir, const char *name);

#endif
