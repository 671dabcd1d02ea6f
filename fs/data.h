/* SPDX-License-Identifier: MIT */
/*
 * data.h - workspace/, uploads/, outputs/ and skills/ (N_DATA nodes): a
 * passthrough to the thread's host directories.
 */
#ifndef SBX_DATA_H
#define SBX_DATA_H

#include "node.h"

/* Register the N_DATA kind; the descriptors of data nodes (nodefd.h) on
 * state_dir's mount.  data_shutdown() at exit. */
void data_init(const char *state_dir);
void data_shutdown(void);
/* LOOKUP of data directory `which` (enum datadir) in a sandbox directory:
 * 0 and a counted entry, or an errno. */
int data_lookup_root(struct view *v, int which, struct fuse_entry_param *e);
/* After a job of s ended: drop the kernel's cached attributes of every
 * data inode of s's current view (never from a FUSE worker). */
void data_inval_sbx(struct sbx *s);
/* The watcher (fswatch.c; no lock held): name changed in the directory
 * (ddev, dino) of v / the file (dev, ino) of v changed (its pages too when
 * data).  Each returns how many notifications it sent (0: the kernel does
 * not know that node). */
int data_inval_dirent(struct view *v, dev_t ddev, ino_t dino, const char *name);
int data_inval_file(struct view *v, dev_t dev, ino_t ino, bool data);

#endif
