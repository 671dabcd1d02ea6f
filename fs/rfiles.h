/* SPDX-License-Identifier: MIT */
/*
 * rfiles.h - workspace/, uploads/ and outputs/ of a sandbox whose provider
 * has remote files (sbx_files(box) != NULL: opensandbox, aio at a
 * base_url): the N_RFILE nodes, served through the provider's files ops
 * with a host-side cache under state_dir.
 *
 * Consistency is close-to-open, as NFS: an open revalidates the file with
 * the sandbox (stat) and reuses the cached bytes only when size and mtime
 * are unchanged; writes go to the cache and are uploaded at close(2)
 * (FLUSH) and fsync(2), whose error is the upload's; a failed upload keeps
 * the local copy (dirty) and the next close or fsync tries again.  A job's
 * changes are seen at the next open after the job ends (rfiles_inval_sbx).
 * Listings and attributes are cached for RFILES_TTL_MS.
 */
#ifndef SBX_RFILES_H
#define SBX_RFILES_H

#include "node.h"

/* Register the N_RFILE kind. */
void rfiles_init(void);
/* Whether data directory `which` of v is remote (its box has files ops). */
bool rfiles_is_remote(struct view *v, int which);
/* LOOKUP of data directory `which` (workspace, uploads, outputs) of v: 0
 * and a counted entry, or an errno.  Never blocks on the network. */
int rfiles_lookup_root(struct view *v, int which, struct fuse_entry_param *e);
/* After a job of s ended: forget cached attributes and listings of s's
 * current view (the next open revalidates anyway). */
void rfiles_inval_sbx(struct sbx *s);

/* At exit: remove the cache files (not those of failed uploads, which are
 * logged with their path). */
void rfiles_shutdown(void);

#endif
