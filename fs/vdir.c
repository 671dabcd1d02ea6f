/* SPDX-License-Identifier: MIT */
/*
 * vdir.c - listings of virtual directories (see vdir.h).  READDIRPLUS
 * answers carry no attributes (nodeid 0): the kernel looks an entry up
 * itself when it needs one, so a listing never creates nodes.
 */
#define _GNU_SOURCE
#include "vdir.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "handle.h"

struct vdir {
	struct buf names; /* NUL-separated */
	unsigned char *types;
	size_t count, alloc;
	int failed;
};

static void vdir_clean(void *p)
{
	struct vdir *d = p;

	buf_free(&d->names);
	free(d->types);
}

struct vdir *vdir_new(void)
{
	struct vdir *d = handle_alloc(sizeof(*d), vdir_clean);

	if (!d)
		return NULL;
	buf_init(&d->names, BUF_CAP_JSON);
	vdir_add(d, ".", DT_DIR);
	vdir_add(d, "..", DT_DIR);
	return d;
}

void vdir_add(struct vdir *d, const char *name, unsigned char type)
{
	if (d->count == d->alloc) {
		size_t n = d->alloc ? d->alloc * 2 : 16;
		unsigned char *t = realloc(d->types, n);
		if (!t) {
			d->failed = 1;
			return;
		}
		d->types = t;
		d->alloc = n;
	}
	if (buf_add(&d->names, name, strlen(name) + 1)) {
		d->failed = 1;
		return;
	}
	d->types[d->count++] = type;
}

void vdir_reply_open(fuse_req_t req, struct vdir *d, struct fuse_file_info *fi)
{
	if (d->failed) {
		handle_discard(d);
		return (void)fuse_reply_err(req, ENOMEM);
	}
	fi->fh = (uint64_t)(uintptr_t)d;
	fuse_reply_open(req, fi);
}

static void vdir_fill(fuse_req_t req, size_t size, off_t off, struct fuse_file_info *fi, bool plus)
{
	struct vdir *d = (struct vdir *)(uintptr_t)fi->fh;
	const char *name = buf_str(&d->names);
	char *buf = calloc(1, size ? size : 1), *p = buf;
	size_t rem = size;

	if (!buf)
		return (void)fuse_reply_err(req, ENOMEM);
	for (size_t i = 0; i < d->count; i++, name += strlen(name) + 1) {
		size_t ent;

		if ((off_t)i < off)
			continue;
		if (plus) {
			struct fuse_entry_param e;
			memset(&e, 0, sizeof(e)); /* nodeid 0: the kernel looks it up itself */
			e.attr.st_ino = i + 1;     /* but readdir(3) hides d_ino 0 */
			e.attr.st_mode = (mode_t)(d->types[i] << 12);
			ent = fuse_add_direntry_plus(req, p, rem, name, &e, (off_t)i + 1);
		} else {
			struct stat st = { .st_ino = i + 1, .st_mode = (mode_t)(d->types[i] << 12) };
			ent = fuse_add_direntry(req, p, rem, name, &st, (off_t)i + 1);
		}
		if (ent > rem)
			break;
		p += ent;
		rem -= ent;
	}
	fuse_reply_buf(req, buf, size - rem);
	free(buf);
}

void vdir_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)ino;
	vdir_fill(req, size, off, fi, false);
}

void vdir_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)ino;
	vdir_fill(req, size, off, fi, true);
}

void vdir_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	handle_retire((void *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}
