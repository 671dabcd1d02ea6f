/* SPDX-License-Identifier: MIT */
/*
 * err.h - the daemon's one error type.  Every layer below the FUSE layer
 * (providers, the HTTP helpers they share) returns enum sbx_err; transport
 * detail (errno of a syscall, CURLcode, HTTP status, JSON decoding) stays
 * inside the module that met it, which logs it.  sbx_err_errno() is the one
 * place that turns an error into an errno (default EIO), like curl's
 * CURLcode and libfuse's single reply.
 */
#ifndef SBX_ERR_H
#define SBX_ERR_H

enum sbx_err {
	SBX_OK = 0,
	SBX_ERR_IO,      /* anything else: EIO */
	SBX_ERR_TIMEOUT, /* ETIMEDOUT */
	SBX_ERR_NOSPC,   /* ENOSPC */
	SBX_ERR_ACCESS,  /* EACCES */
	SBX_ERR_NOMEM,   /* ENOMEM */
	SBX_ERR_GONE,    /* the sandbox (or path) no longer exists: ENOENT */
	SBX_ERR_INVAL,   /* EINVAL */
	SBX_ERR_BUSY,    /* EBUSY */
	SBX_ERR_NOTSUP,  /* EOPNOTSUPP: the provider cannot do this */
	SBX_ERR_EXIST,   /* EEXIST */
	SBX_ERR_QUOTA,   /* EDQUOT */
	SBX_ERR_TOOBIG,  /* EFBIG */
	SBX_ERR_PERM,    /* EPERM */
	SBX_ERR_NOTEMPTY, /* ENOTEMPTY: rmdir of a directory that has entries (remote files) */
	SBX_ERR_NOTDIR,  /* ENOTDIR */
	SBX_ERR_ISDIR,   /* EISDIR */
	SBX_ERR_INTR,    /* EINTR: the caller gave up (a FUSE interrupt cancelled the work) */
	SBX_ERR_COUNT
};

int sbx_err_errno(enum sbx_err e);
const char *sbx_err_name(enum sbx_err e);
enum sbx_err sbx_err_from_errno(int err);
/* The error a remote tool's message names in strerror()'s words ("No such
 * file or directory", "Permission denied", "Directory not empty", ...,
 * case-insensitive, anywhere in text), or SBX_ERR_IO when none does: how
 * remote APIs that report an errno only as text (execd's RUNTIME_ERROR, a
 * coreutils command's stderr) are mapped. */
enum sbx_err sbx_err_from_message(const char *text);

#endif
