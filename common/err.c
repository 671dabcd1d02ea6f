/* SPDX-License-Identifier: MIT */
/*
 * err.c - the one translation between enum sbx_err and errno (err.h).
 */
#include "err.h"

#include <errno.h>
#include <stddef.h>

int sbx_err_errno(enum sbx_err e)
{
	switch (e) {
	case SBX_OK:
		return 0;
	case SBX_ERR_TIMEOUT:
		return ETIMEDOUT;
	case SBX_ERR_NOSPC:
		return ENOSPC;
	case SBX_ERR_ACCESS:
		return EACCES;
	case SBX_ERR_NOMEM:
		return ENOMEM;
	case SBX_ERR_GONE:
		return ENOENT;
	case SBX_ERR_INVAL:
		return EINVAL;
	case SBX_ERR_BUSY:
		return EBUSY;
	case SBX_ERR_NOTSUP:
		return EOPNOTSUPP;
	case SBX_ERR_EXIST:
		return EEXIST;
	case SBX_ERR_QUOTA:
		return EDQUOT;
	case SBX_ERR_TOOBIG:
		return EFBIG;
	case SBX_ERR_PERM:
		return EPERM;
	case SBX_ERR_NOTEMPTY:
		return ENOTEMPTY;
	case SBX_ERR_NOTDIR:
		return ENOTDIR;
	case SBX_ERR_ISDIR:
		return EISDIR;
	case SBX_ERR_INTR:
		return EINTR;
	default:
		return EIO;
	}
}

enum sbx_err sbx_err_from_errno(int err)
{
	switch (err) {
	case 0:
		return SBX_OK;
	case ETIMEDOUT:
		return SBX_ERR_TIMEOUT;
	case ENOSPC:
		return SBX_ERR_NOSPC;
	case EACCES:
		return SBX_ERR_ACCESS;
	case ENOMEM:
	case EAGAIN:
		return SBX_ERR_NOMEM;
	case ENOENT:
	case ESRCH:
		return SBX_ERR_GONE;
	case EINVAL:
		return SBX_ERR_INVAL;
	case EBUSY:
		return SBX_ERR_BUSY;
	case EOPNOTSUPP:
		return SBX_ERR_NOTSUP;
	case EEXIST:
		return SBX_ERR_EXIST;
	case EDQUOT:
		return SBX_ERR_QUOTA;
	case EFBIG:
		return SBX_ERR_TOOBIG;
	case EPERM:
		return SBX_ERR_PERM;
	case ENOTEMPTY:
		return SBX_ERR_NOTEMPTY;
	case ENOTDIR:
		return SBX_ERR_NOTDIR;
	case EISDIR:
		return SBX_ERR_ISDIR;
	default:
		return SBX_ERR_IO;
	}
}

enum sbx_err sbx_err_from_message(const char *text)
{
	/* strerror()'s words for the errnos a file API reports, in the order
	 * they are checked (the most specific first) */
	static const struct {
		const char *words;
		enum sbx_err e;
	} map[] = {
		{ "no such file", SBX_ERR_GONE }, { "not found", SBX_ERR_GONE }, { "does not exist", SBX_ERR_GONE },
		{ "directory not empty", SBX_ERR_NOTEMPTY }, { "not a directory", SBX_ERR_NOTDIR },
		{ "is a directory", SBX_ERR_ISDIR }, { "file exists", SBX_ERR_EXIST },
		{ "no space left", SBX_ERR_NOSPC }, { "quota exceeded", SBX_ERR_QUOTA },
		{ "file too large", SBX_ERR_TOOBIG }, { "read-only file system", SBX_ERR_ACCESS },
		{ "permission denied", SBX_ERR_ACCESS }, { "operation not permitted", SBX_ERR_PERM },
		{ "invalid argument", SBX_ERR_INVAL }, { "timed out", SBX_ERR_TIMEOUT },
	};

	if (!text)
		return SBX_ERR_IO;
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		for (const char *p = text; *p; p++) {
			size_t k = 0;

			while (map[i].words[k] && p[k] && (p[k] | 0x20) == map[i].words[k])
				k++;
			if (!map[i].words[k])
				return map[i].e;
		}
	return SBX_ERR_IO;
}

const char *sbx_err_name(enum sbx_err e)
{
	static const char *names[SBX_ERR_COUNT] = { "ok", "io", "timeout", "nospc", "access", "nomem", "gone", "inval",
		"busy", "notsup", "exist", "quota", "toobig", "perm", "notempty", "notdir", "isdir", "intr" };

	return (unsigned)e < SBX_ERR_COUNT ? names[e] : "io";
}
