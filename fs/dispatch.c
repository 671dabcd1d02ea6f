/* SPDX-License-Identifier: MIT */
/*
 * dispatch.c - the low-level operations libfuse calls for the whole mount:
 * each request goes to the module serving the kind of its node (see
 * node_kind_register), or gets the default answer here when that module
 * has no such operation.
 *
 * Defaults follow what a user of cgroupfs or configfs sees: changes to
 * anything that is not a data file are EPERM, operations that need a data
 * file are ENOTSUP or EXDEV, xattrs of virtual nodes do not exist.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/statvfs.h>

#include "node.h"
#include "uring.h"

struct fs fs;

const char *const fs_req_names[FSR_COUNT] = {
	[FSR_LOOKUP] = "lookup", [FSR_FORGET] = "forget", [FSR_FORGET_MULTI] = "batch_forget",
	[FSR_GETATTR] = "getattr", [FSR_SETATTR] = "setattr", [FSR_READLINK] = "readlink", [FSR_MKNOD] = "mknod",
	[FSR_MKDIR] = "mkdir", [FSR_UNLINK] = "unlink", [FSR_RMDIR] = "rmdir", [FSR_SYMLINK] = "symlink",
	[FSR_RENAME] = "rename", [FSR_LINK] = "link", [FSR_OPEN] = "open", [FSR_READ] = "read",
	[FSR_WRITE_BUF] = "write", [FSR_FLUSH] = "flush", [FSR_RELEASE] = "release", [FSR_FSYNC] = "fsync",
	[FSR_OPENDIR] = "opendir", [FSR_READDIR] = "readdir", [FSR_READDIRPLUS] = "readdirplus",
	[FSR_RELEASEDIR] = "releasedir", [FSR_FSYNCDIR] = "fsyncdir", [FSR_STATFS] = "statfs",
	[FSR_SETXATTR] = "setxattr", [FSR_GETXATTR] = "getxattr", [FSR_LISTXATTR] = "listxattr",
	[FSR_REMOVEXATTR] = "removexattr", [FSR_CREATE] = "create", [FSR_POLL] = "poll",
	[FSR_FALLOCATE] = "fallocate", [FSR_FLOCK] = "flock", [FSR_LSEEK] = "lseek",
	[FSR_COPY_FILE_RANGE] = "copy_file_range",
};

static const struct fuse_lowlevel_ops *ops_of(fuse_ino_t ino)
{
	const struct node_kind_ops *k = node_kind(node_of(ino)->kind);
	static const struct fuse_lowlevel_ops none;

	return k && k->ops ? k->ops : &none;
}

static bool is_data(fuse_ino_t ino)
{
	return node_of(ino)->kind == N_DATA;
}

static void d_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	const struct fuse_lowlevel_ops *o = ops_of(parent);

	fs_req_count(FSR_LOOKUP);
	if (o->lookup)
		return o->lookup(req, parent, name);
	fuse_reply_err(req, ENOTDIR);
}

static void d_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	fs_req_count(FSR_FORGET);
	node_forget(node_of(ino), nlookup);
	fuse_reply_none(req);
}

static void d_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	fs_req_count(FSR_FORGET_MULTI);
	for (size_t i = 0; i < count; i++)
		node_forget(node_of(forgets[i].ino), forgets[i].nlookup);
	fuse_reply_none(req);
}

static void d_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino);
	struct stat st;

	fs_req_count(FSR_GETATTR);
	if (o->getattr)
		return o->getattr(req, ino, fi);
	vnode_attr(node_of(ino), S_IFREG | 0444, 0, &st);
	fuse_reply_attr(req, &st, 0);
}

static void d_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid, struct fuse_file_info *fi)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino);

	fs_req_count(FSR_SETATTR);
	if (o->setattr)
		return o->setattr(req, ino, attr, valid, fi);
	fuse_reply_err(req, EPERM);
}

static void d_readlink(fuse_req_t req, fuse_ino_t ino)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino);

	fs_req_count(FSR_READLINK);
	if (o->readlink)
		return o->readlink(req, ino);
	fuse_reply_err(req, EINVAL);
}

static void d_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	const struct fuse_lowlevel_ops *o = ops_of(parent);

	fs_req_count(FSR_MKNOD);
	if (o->mknod)
		return o->mknod(req, parent, name, mode, rdev);
	fuse_reply_err(req, EPERM);
}

static void d_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	const struct fuse_lowlevel_ops *o = ops_of(parent);

	fs_req_count(FSR_MKDIR);
	if (o->mkdir)
		return o->mkdir(req, parent, name, mode);
	fuse_reply_err(req, EPERM);
}

static void d_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	const struct fuse_lowlevel_ops *o = ops_of(parent);

	fs_req_count(FSR_UNLINK);
	if (o->unlink)
		return o->unlink(req, parent, name);
	fuse_reply_err(req, EPERM);
}

static void d_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	const struct fuse_lowlevel_ops *o = ops_of(parent);

	fs_req_count(FSR_RMDIR);
	if (o->rmdir)
		return o->rmdir(req, parent, name);
	fuse_reply_err(req, EPERM);
}

static void d_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	const struct fuse_lowlevel_ops *o = ops_of(parent);

	fs_req_count(FSR_SYMLINK);
	if (o->symlink)
		return o->symlink(req, link, parent, name);
	fuse_reply_err(req, EPERM);
}

static void d_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent, const char *newname,
	unsigned int flags)
{
	const struct fuse_lowlevel_ops *o = ops_of(parent);

	fs_req_count(FSR_RENAME);
	if (o->rename)
		return o->rename(req, parent, name, newparent, newname, flags);
	fuse_reply_err(req, is_data(newparent) ? EXDEV : EPERM);
}

static void d_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	const struct fuse_lowlevel_ops *o = ops_of(newparent);

	fs_req_count(FSR_LINK);
	if (o->link)
		return o->link(req, ino, newparent, newname);
	fuse_reply_err(req, EPERM);
}

static void d_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino);

	fs_req_count(FSR_OPEN);
	if (o->open)
		return o->open(req, ino, fi);
	fuse_reply_err(req, EPERM);
}

static void d_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino);

	fs_req_count(FSR_READ);
	if (o->read)
		return o->read(req, ino, size, off, fi);
	fuse_reply_err(req, EBADF);
}

static void d_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in, off_t off, struct fuse_file_info *fi)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino);

	fs_req_count(FSR_WRITE_BUF);
	if (o->write_buf)
		return o->write_buf(req, ino, in, off, fi);
	fuse_reply_err(req, EPERM);
}

/* Only files opened without noflush get here (job cmd, remote files): the
 * kernel skips FLUSH for the others, so close(2) of a data file costs no
 * round trip. */
static void d_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino);

	fs_req_count(FSR_FLUSH);
	if (o->flush)
		return o->flush(req, ino, fi);
	fuse_reply_err(req, 0);
}

static void d_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino);

	fs_req_count(FSR_RELEASE);
	if (o->release)
		return o->release(req, ino, fi);
	fuse_reply_err(req, 0);
}

static void d_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino);

	fs_req_count(FSR_FSYNC);
	if (o->fsync)
		return o->fsync(req, ino, datasync, fi);
	fuse_reply_err(req, 0);
}

static void d_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino);

	fs_req_count(FSR_OPENDIR);
	if (o->opendir)
		return o->opendir(req, ino, fi);
	fuse_reply_err(req, ENOTDIR);
}

static void d_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino);

	fs_req_count(FSR_READDIR);
	if (o->readdir)
		return o->readdir(req, ino, size, off, fi);
	fuse_reply_err(req, ENOTDIR);
}

static void d_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino);

	fs_req_count(FSR_READDIRPLUS);
	if (o->readdirplus)
		return o->readdirplus(req, ino, size, off, fi);
	if (o->readdir)
		return o->readdir(req, ino, size, off, fi);
	fuse_reply_err(req, ENOTDIR);
}

static void d_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino);

	fs_req_count(FSR_RELEASEDIR);
	if (o->releasedir)
		return o->releasedir(req, ino, fi);
	fuse_reply_err(req, 0);
}

static void d_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino);

	fs_req_count(FSR_FSYNCDIR);
	if (o->fsyncdir)
		return o->fsyncdir(req, ino, datasync, fi);
	fuse_reply_err(req, 0);
}

static void d_statfs(fuse_req_t req, fuse_ino_t ino)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino);
	struct statvfs sv;

	fs_req_count(FSR_STATFS);
	if (o->statfs)
		return o->statfs(req, ino);
	if (statvfs(fs.cfg->state_dir, &sv))
		return (void)fuse_reply_err(req, errno);
	fuse_reply_statfs(req, &sv);
}

static void d_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size, int flags)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino);

	fs_req_count(FSR_SETXATTR);
	if (o->setxattr)
		return o->setxattr(req, ino, name, value, size, flags);
	fuse_reply_err(req, EPERM);
}

static void d_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino);

	fs_req_count(FSR_GETXATTR);
	if (o->getxattr)
		return o->getxattr(req, ino, name, size);
	fuse_reply_err(req, ENODATA);
}

static void d_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino);

	fs_req_count(FSR_LISTXATTR);
	if (o->listxattr)
		return o->listxattr(req, ino, size);
	if (size)
		fuse_reply_buf(req, NULL, 0);
	else
		fuse_reply_xattr(req, 0);
}

static void d_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino);

	fs_req_count(FSR_REMOVEXATTR);
	if (o->removexattr)
		return o->removexattr(req, ino, name);
	fuse_reply_err(req, EPERM);
}

static void d_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi)
{
	const struct fuse_lowlevel_ops *o = ops_of(parent);

	fs_req_count(FSR_CREATE);
	if (o->create)
		return o->create(req, parent, name, mode, fi);
	fuse_reply_err(req, EPERM);
}

static void d_poll(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, struct fuse_pollhandle *ph)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino);

	fs_req_count(FSR_POLL);
	if (o->poll)
		return o->poll(req, ino, fi, ph);
	if (ph)
		fuse_pollhandle_destroy(ph);
	fuse_reply_poll(req, POLLIN | POLLOUT | POLLRDNORM | POLLWRNORM);
}

static void d_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len, struct fuse_file_info *fi)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino);

	fs_req_count(FSR_FALLOCATE);
	if (o->fallocate)
		return o->fallocate(req, ino, mode, off, len, fi);
	fuse_reply_err(req, ENOTSUP);
}

static void d_flock(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, int op)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino);

	fs_req_count(FSR_FLOCK);
	if (o->flock)
		return o->flock(req, ino, fi, op);
	fuse_reply_err(req, ENOTSUP);
}

static void d_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino);

	fs_req_count(FSR_LSEEK);
	if (o->lseek)
		return o->lseek(req, ino, off, whence, fi);
	fuse_reply_err(req, ENOTSUP);
}

static void d_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, struct fuse_file_info *fi_in,
	fuse_ino_t ino_out, off_t off_out, struct fuse_file_info *fi_out, size_t len, int flags)
{
	const struct fuse_lowlevel_ops *o = ops_of(ino_in);

	fs_req_count(FSR_COPY_FILE_RANGE);
	if (o->copy_file_range && node_of(ino_out)->kind == node_of(ino_in)->kind)
		return o->copy_file_range(req, ino_in, off_in, fi_in, ino_out, off_out, fi_out, len, flags);
	fuse_reply_err(req, EXDEV);
}

static void d_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	conn->max_write = 1024 * 1024;
	conn->max_readahead = conn->max_readahead > 1024 * 1024 ? conn->max_readahead : 1024 * 1024;
	conn->want |= FUSE_CAP_ATOMIC_O_TRUNC & conn->capable;
	conn->want |= FUSE_CAP_SPLICE_WRITE & conn->capable;
	conn->want |= FUSE_CAP_SPLICE_MOVE & conn->capable;
	conn->want |= FUSE_CAP_AUTO_INVAL_DATA & conn->capable;
	conn->want |= FUSE_CAP_PARALLEL_DIROPS & conn->capable;
	conn->want |= FUSE_CAP_FLOCK_LOCKS & conn->capable;
	conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
#ifdef FUSE_CAP_HANDLE_KILLPRIV_V2
	/* set-id bits are ours to remove on write and truncate (data.c): the
	 * kernel then stops asking for security.capability before each write
	 * (libfuse 3.14 lacks the constant: there the kernel does it) */
	if (conn->capable & FUSE_CAP_HANDLE_KILLPRIV_V2) {
		conn->want |= FUSE_CAP_HANDLE_KILLPRIV_V2;
		fs.killpriv = true;
	}
#endif
#ifdef SBXFS_FUSE_PASSTHROUGH
	/* reads, writes and mmap of data files go straight to the host file
	 * (kernel >= 6.9, libfuse >= 3.16); data.c falls back per file */
	if (conn->capable & FUSE_CAP_PASSTHROUGH) {
		conn->want |= FUSE_CAP_PASSTHROUGH;
		fs.passthrough = true;
	}
#endif
	/* Requests are read with read(2), not spliced: only a WRITE gains from
	 * a splice, and with passthrough no data file's WRITE reaches us.  A
	 * spliced request is two calls (splice, then read back whatever is not
	 * write data), and the pipe must hold max_write + a page, more than
	 * pipe-max-size (1 MiB) allows without CAP_SYS_RESOURCE: libfuse >= 3.17
	 * then makes, fails to grow and closes a new pipe for every request
	 * (8 system calls each; docs/performance.md).  The copy path keeps it. */
	if (!fs.passthrough)
		conn->want |= FUSE_CAP_SPLICE_READ & conn->capable;
	else
		conn->want &= ~FUSE_CAP_SPLICE_READ;
	uring_init(conn);
}

const struct fuse_lowlevel_ops fs_ops = {
	.init = d_init,
	.lookup = d_lookup,
	.forget = d_forget,
	.forget_multi = d_forget_multi,
	.getattr = d_getattr,
	.setattr = d_setattr,
	.readlink = d_readlink,
	.mknod = d_mknod,
	.mkdir = d_mkdir,
	.unlink = d_unlink,
	.rmdir = d_rmdir,
	.symlink = d_symlink,
	.rename = d_rename,
	.link = d_link,
	.open = d_open,
	.read = d_read,
	.write_buf = d_write_buf,
	.flush = d_flush,
	.release = d_release,
	.fsync = d_fsync,
	.opendir = d_opendir,
	.readdir = d_readdir,
	.readdirplus = d_readdirplus,
	.releasedir = d_releasedir,
	.fsyncdir = d_fsyncdir,
	.statfs = d_statfs,
	.setxattr = d_setxattr,
	.getxattr = d_getxattr,
	.listxattr = d_listxattr,
	.removexattr = d_removexattr,
	.create = d_create,
	.poll = d_poll,
	.fallocate = d_fallocate,
	.flock = d_flock,
	.copy_file_range = d_copy_file_range,
	.lseek = d_lseek,
};
