/* SPDX-License-Identifier: MIT */
/*
 * nodefd.h - the host descriptors of data nodes, bounded (issue 19).
 *
 * A data node (data.c) stands for a host file the kernel remembers.  It
 * keeps a file handle of it (name_to_handle_at), and an O_PATH descriptor
 * only while it is used or cached: the descriptors of nodes not in use are
 * kept in one LRU list of at most budget_data_cache() entries and reopened
 * by their handle when needed again (open_by_handle_at, relative to a
 * descriptor on state_dir's mount; the daemon has CAP_DAC_READ_SEARCH), as
 * virtiofsd's --inode-file-handles does.  So how many files sandboxes make,
 * and the kernel remembers, no longer decides how many descriptors the
 * daemon holds.
 *
 * Fixed nodes: where handles do not work (state_dir on a filesystem without
 * export support, a daemon without CAP_DAC_READ_SEARCH: for every node; a
 * file on another mount than state_dir's: for that node) a node keeps its
 * descriptor for life, charged to its sandbox's data share (budget.h), so
 * even then one sandbox can hold only its own budget.
 *
 * Identity: a node's descriptor pins its inode, so a node that has one is
 * the file of its inode number; a node without one may be a removed file
 * whose number a new file got, and nfd_same_at/nfd_same_fd compare handles.
 * Gone: a node whose file was removed and whose descriptor was evicted
 * cannot be reopened: nfd_get answers ESTALE, which makes the kernel look
 * the path up again (the answer it gets for any removed file that nobody
 * has open, see data.c).
 *
 * Lock: nfd.lock (inside), a leaf (its place: docs/architecture.md, "Lock
 * order"); held across a name_to_handle_at of an evicted descriptor (an
 * in-memory encoding on local filesystems), never across an open or close.
 */
#ifndef SBX_NODEFD_H
#define SBX_NODEFD_H

#include <stdbool.h>
#include <stdint.h>

#include "node.h"

/* At start: the mount descriptor, whether handles work (logged when not).
 * free_node frees a data node forgotten while in use (see nfd_forget). */
void nfd_init(const char *state_dir, void (*free_node)(struct node *n));
void nfd_shutdown(void);

/* Before making a node of view v: where nodes keep their descriptor for
 * life, charge it to v's sandbox (0, EMFILE, ENFILE: nothing charged).
 * *charged says whether nfd_attach_locked or nfd_uncharge must follow. */
int nfd_charge(struct view *v, bool *charged);
void nfd_uncharge(struct view *v);
/* v->lock held, n not yet in the view's table: n takes fd (O_PATH).  Then
 * nfd_trim() once the lock is dropped. */
void nfd_attach_locked(struct node *n, int fd, bool charged);
/* Evict cached descriptors past the cap (no lock held). */
void nfd_trim(void);

/* n's descriptor for one operation (reopened by handle if it was evicted),
 * or -errno: ESTALE when the file is gone.  nfd_put(n) after, before the
 * reply (the kernel may forget n once it has its answer).  An open file
 * keeps its use from open to release. */
int nfd_get(struct node *n);
void nfd_put(struct node *n);

/* Whether n is the file now at name in dirfd (no symlink followed) / open
 * on fd: true when n holds a descriptor (it pins its inode), else a
 * comparison of handles.  The caller holds a lookup reference on n. */
bool nfd_same_at(struct node *n, int dirfd, const char *name);
bool nfd_same_fd(struct node *n, int fd);
/* Whether n holds a descriptor now. */
bool nfd_pinned(struct node *n);
/* n was found to be its file (nfd_same_fd): it takes fd if it holds none
 * (saves a reopen), else fd is closed. */
void nfd_offer(struct node *n, int fd);
/* n's file is not what its inode number names any more: never reopened. */
void nfd_stale(struct node *n);
/* The kernel forgot n (out of its view's table): its descriptor is closed
 * and true returned, or, while an operation still uses it, false, and the
 * last nfd_put calls free_node(n). */
bool nfd_forget(struct node *n);

struct nfd_stats {
	bool handles;       /* nodes hold handles (else every node is fixed) */
	long nodes;         /* data nodes */
	long cached;        /* descriptors held for nodes that have a handle, in use or not */
	long fixed;         /* descriptors held for life (no handle) */
	long in_use;        /* nodes used by an operation or an open file */
	uint64_t reopens;   /* descriptors reopened by handle */
	uint64_t evictions; /* descriptors closed by the cache's cap */
	uint64_t stale;     /* reopens that found the file gone */
};
void nfd_stats(struct nfd_stats *st);

#endif
