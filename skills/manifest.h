/* SPDX-License-Identifier: MIT */
/*
 * manifest.h - what a skills/ tree holds, as the sync compares it (DESIGN
 * §8): one entry per directory, file and symlink, with its path relative to
 * the tree, kind, size, mode and the SHA-256 of its content; the diff of two
 * manifests as the operations that turn the older into the newer; the
 * manifest's JSON form, persisted under state_dir so that a restart does not
 * upload everything again.
 *
 * Invariants: entries are sorted by strcmp() of their paths, so a directory
 * comes before everything under it and a reversed walk visits children
 * before their parents.  Paths never start or end with '/', never hold "."
 * or ".." components or empty ones.
 *
 * Symlinks: one that is absolute, or whose target leaves the tree, or that
 * names another symlink, is refused (left out, counted in `refused`); one
 * that names a regular file inside the tree is projected as a copy of that
 * file (kind SK_LINK: the upload API has no symlinks); one that names a
 * directory is left out (`refused` too).  FIFOs, sockets and devices are
 * left out silently.
 *
 * Pure and thread-compatible: no global state; a manifest belongs to one
 * caller at a time.
 */
#ifndef SBX_SKILLS_MANIFEST_H
#define SBX_SKILLS_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/buf.h"

enum skills_kind { SK_DIR, SK_FILE, SK_LINK };

#define SKILLS_SHA_HEX 64

struct skills_ent {
	char *path; /* relative to the tree, malloc'd */
	enum skills_kind kind;
	uint64_t size;
	mode_t mode;                   /* permission bits (of the target for SK_LINK) */
	char sha[SKILLS_SHA_HEX + 1]; /* files and links: SHA-256 of the content; dirs: "" */
	/* change detection (not compared): the content's stat when it was hashed */
	uint64_t dev, ino;
	int64_t mtime_ns, ctime_ns;
};

struct skills_manifest {
	struct skills_ent *e;
	size_t n, alloc;
	uint64_t bytes; /* sum of the sizes of files and links */
	size_t files;   /* files and links */
	size_t dirs;
};

/* The limits of a tree (DESIGN §8); 0 = no limit. */
struct skills_limits {
	uint64_t max_file;  /* bytes of one file: EFBIG */
	uint64_t max_total; /* bytes of all files: ENOSPC */
	uint64_t max_files; /* files and links: ENOSPC */
};

struct skills_scan_result {
	size_t refused;          /* symlinks left out */
	char first_refused[256]; /* the path of the first one, for the log and status */
	int err;                 /* 0, EFBIG or ENOSPC (a limit), or the errno of the walk */
	char err_path[256];      /* where err happened */
};

void skills_manifest_init(struct skills_manifest *m);
void skills_manifest_free(struct skills_manifest *m);
/* Move src into dst (dst freed first); src is left empty. */
void skills_manifest_move(struct skills_manifest *dst, struct skills_manifest *src);

/* Walk the tree at root into out (sorted).  Content is hashed only where
 * prev (may be NULL) has no entry of the same path whose dev, inode, size,
 * mtime and ctime still match, as git's index does.  hash = false gives
 * kinds, sizes and modes only (usage for the limits: no content read).
 * 0, or -1 with res->err set (a limit or the walk's errno); out then holds
 * what was walked.  res may not be NULL. */
int skills_manifest_scan(const char *root, const struct skills_manifest *prev, const struct skills_limits *lim,
	bool hash, struct skills_manifest *out, struct skills_scan_result *res);

/* ---- diff ------------------------------------------------------------------ */

enum skills_op_kind { SKOP_REMOVE, SKOP_MKDIR, SKOP_UPLOAD };

struct skills_op {
	enum skills_op_kind kind;
	const char *path;           /* borrowed from the manifests */
	bool is_dir;                /* SKOP_REMOVE: a directory (removed with everything under it) */
	const struct skills_ent *to; /* SKOP_UPLOAD, SKOP_MKDIR: the new entry */
	bool done;                  /* set by the caller when the operation succeeded */
};

/* The operations from `from` to `to`, in the order to run them: removals
 * (a removed directory's content is not listed again), then directories
 * parents first, then uploads.  A changed kind is a removal and a
 * creation.  A directory whose mode alone changed is not an operation.
 * *ops is malloc'd (free() it); the paths it borrows live as long as the
 * manifests.  0 or -1 (ENOMEM). */
int skills_diff(const struct skills_manifest *from, const struct skills_manifest *to, struct skills_op **ops,
	size_t *n);

/* What the sandbox holds after running ops (some failed): for each path the
 * entry of `to` when its operation succeeded or none was needed, else that
 * of `from` (a failed removal of a directory keeps what was under it).
 * 0 or -1 (ENOMEM). */
int skills_manifest_result(const struct skills_manifest *from, const struct skills_manifest *to,
	const struct skills_op *ops, size_t n, struct skills_manifest *out);

/* ---- persistence ------------------------------------------------------------- */

/* {"version":1,"remote_id":...,"entries":[[path,kind,size,mode,sha,dev,ino,mtime_ns,ctime_ns],...]}
 * written atomically. 0 or -1 with errno. */
int skills_manifest_save(const char *path, const char *remote_id, const struct skills_manifest *m);
/* 0 and the manifest recorded for remote_id; -1 when the file is missing,
 * unreadable, malformed or of another remote sandbox (m is then empty). */
int skills_manifest_load(const char *path, const char *remote_id, struct skills_manifest *m);

/* Whether a symlink at rel_dir (the directory holding it, relative to the
 * tree, "" for the top) with this target stays inside the tree: a relative
 * target whose ".." never climbs above the top. */
bool skills_link_inside(const char *rel_dir, const char *target);

#endif
