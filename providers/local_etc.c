/* SPDX-License-Identifier: MIT */
/*
 * local_etc.c - the curated /etc of local sandboxes (see local_etc.h).
 *
 * Why a copy and not bind mounts of single files: a bind of a file pins the
 * inode the host had at that moment (an editor or a package upgrade that
 * replaces the file leaves sandboxes with the old one), and bubblewrap's
 * command line would grow by a hundred arguments.  A copy refreshed at each
 * start keeps the sandbox's /etc one bind of one directory; files are
 * replaced by rename, so running sandboxes see the new contents.
 *
 * Why an allow list: /etc holds secrets (shadow, host keys, API keys in
 * service configurations, sbxfs's own mount.conf) next to what programs
 * need; only names known to be needed are copied, and of those only what
 * every host user may read anyway.
 *
 * Symlinks: inside copied directories they are kept as they are (the
 * alternatives system and the certificate store are symlinks into /usr,
 * which sandboxes see); a top-level file that is a symlink out of /usr
 * (resolv.conf into /run, for instance) is copied as its content.
 */
#define _GNU_SOURCE
#include "local_etc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <grp.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/buf.h"
#include "../common/log.h"
#include "../common/util.h"

#define ETC_HOST "/etc"
#define ETC_FILE_MAX (64 << 20) /* bytes of one copied file */
#define ETC_ENTRIES_MAX 20000   /* entries copied in all */

/* Relative to /etc; shell globs allowed.  Directories are copied whole
 * (world-readable entries only). */
static const char *const etc_allowed[] = {
	/* names, addresses, services */
	"hosts", "host.conf", "resolv.conf", "nsswitch.conf", "gai.conf", "networks", "protocols", "services", "rpc",
	"ethertypes",
	/* the dynamic loader */
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d",
	/* TLS (ssl/certs: bound, below) */
	"ssl/openssl.cnf", "ca-certificates", "ca-certificates.conf", "pki/tls/certs",
	/* the system */
	"os-release", "lsb-release", "debian_version", "issue", "shells", "localtime", "timezone",
	"locale.alias", "locale.conf", "default/locale", "mime.types", "mailcap", "magic", "magic.mime", "papersize",
	"profile", "profile.d", "bash.bashrc", "inputrc",
	/* programs */
	"python3*", "perl", "fonts", "gitconfig", "wgetrc", "pip.conf", "vim", "java-*", "ImageMagick-*",
	"ssh/ssh_config", "ssh/ssh_config.d", "R", "manpath.config",
	NULL,
};

/* Directories of public, package-managed symlinks, hundreds of them: bound
 * read-only as they are rather than copied (a copy costs a symlink(2) each
 * at every start). */
static const char *const etc_bind_dirs[] = { "alternatives", "ssl/certs", NULL };
static const char *etc_bound_list[sizeof(etc_bind_dirs) / sizeof(etc_bind_dirs[0])];

/* Never copied, whatever the list above or a glob matches. */
static const char *const etc_denied[] = { "shadow", "gshadow", "shadow-", "gshadow-", "sudoers", "sudoers.d",
	"sbxfs", "ssh/ssh_host_", "ssl/private", "security", NULL };

static char etc_path[PATH_MAX];
static int etc_entries;

static int etc_mkdir(const char *path);
static void etc_parents(const char *rel);

const char *etc_dir(void)
{
	return etc_path;
}

const char *const *etc_bound(void)
{
	return etc_bound_list;
}

/* Mount points for the bound directories, for those the host has. */
static void etc_bind_points(void)
{
	char src[PATH_MAX], dst[PATH_MAX];
	struct stat st;
	int n = 0;

	for (int i = 0; etc_bind_dirs[i]; i++)
		if (!str_fmt(src, sizeof(src), "%s/%s", ETC_HOST, etc_bind_dirs[i]) && !stat(src, &st) &&
		    S_ISDIR(st.st_mode) && !str_fmt(dst, sizeof(dst), "%s/%s", etc_path, etc_bind_dirs[i])) {
			etc_parents(etc_bind_dirs[i]);
			if (!etc_mkdir(dst))
				etc_bound_list[n++] = etc_bind_dirs[i];
		}
	etc_bound_list[n] = NULL;
}

static int etc_is_denied(const char *rel)
{
	for (int i = 0; etc_denied[i]; i++)
		if (!strncmp(rel, etc_denied[i], strlen(etc_denied[i])))
			return 1;
	return 0;
}

/* Write dst atomically: a temporary name beside it, then rename. */
static int etc_copy_file(const char *src, const char *dst, const struct stat *st)
{
	char tmp[PATH_MAX];
	int in = -1, out = -1, r = -1;
	off_t off = 0;

	if (st->st_size > ETC_FILE_MAX || str_fmt(tmp, sizeof(tmp), "%s.sbxfs-tmp", dst))
		return -1;
	in = open(src, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	unlink(tmp);
	out = in < 0 ? -1 : open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, st->st_mode & 0755);
	if (out < 0)
		goto out;
	while (off < st->st_size)
		if (sendfile(out, in, &off, (size_t)(st->st_size - off)) <= 0)
			goto out;
	if (fchmod(out, st->st_mode & 0755) == 0 && rename(tmp, dst) == 0)
		r = 0;
out:
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	if (r)
		unlink(tmp);
	return r;
}

static int etc_copy_link(const char *src, const char *dst)
{
	char target[PATH_MAX], tmp[PATH_MAX];
	ssize_t n = readlink(src, target, sizeof(target) - 1);

	if (n < 0 || str_fmt(tmp, sizeof(tmp), "%s.sbxfs-tmp", dst))
		return -1;
	target[n] = '\0';
	unlink(tmp);
	if (symlink(target, tmp) || rename(tmp, dst)) {
		unlink(tmp);
		return -1;
	}
	return 0;
}

/* mkdir 0755 whatever the daemon's umask. */
static int etc_mkdir(const char *path)
{
	if (!mkdir(path, 0755)) /* the daemon's umask is 0 (fs/main.c): 0755 */
		return 0;
	return errno == EEXIST ? chmod(path, 0755) : -1;
}

/* A small file, 0644 whatever the daemon's umask. */
static int etc_write(const char *path, const char *text, size_t len)
{
	return util_write_atomic(path, text, len, 0644) || chmod(path, 0644) ? -1 : 0;
}

static int etc_copy(const char *rel, bool top);

static int etc_copy_dir(const char *rel, const char *src, const char *dst)
{
	struct dirent *e;
	char sub[PATH_MAX];
	DIR *d;

	if (etc_mkdir(dst) || !(d = opendir(src)))
		return -1;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && !strstr(e->d_name, ".sbxfs-tmp") &&
		    !str_fmt(sub, sizeof(sub), "%s/%s", rel, e->d_name))
			etc_copy(sub, false);
	closedir(d);
	return 0;
}

/* Copy /etc/rel to the sandbox /etc.  top: a name of the allow list. */
static int etc_copy(const char *rel, bool top)
{
	char src[PATH_MAX], dst[PATH_MAX], real[PATH_MAX];
	struct stat st;

	if (etc_is_denied(rel) || ++etc_entries > ETC_ENTRIES_MAX ||
	    str_fmt(src, sizeof(src), "%s/%s", ETC_HOST, rel) || str_fmt(dst, sizeof(dst), "%s/%s", etc_path, rel) ||
	    lstat(src, &st))
		return -1;
	if (S_ISLNK(st.st_mode)) {
		/* a top-level link out of /usr (resolv.conf into /run): its content */
		if (!top || (realpath(src, real) && !strncmp(real, "/usr/", 5)))
			return etc_copy_link(src, dst);
		if (stat(src, &st) || !S_ISREG(st.st_mode))
			return -1;
	}
	if (S_ISDIR(st.st_mode) && (st.st_mode & 05) == 05)
		return etc_copy_dir(rel, src, dst);
	if (S_ISREG(st.st_mode) && (st.st_mode & 04))
		return etc_copy_file(src, dst, &st);
	return -1; /* not for every user's eyes, or not a file */
}

/* Parents of rel (ssl/certs → ssl/) exist in the copy. */
static void etc_parents(const char *rel)
{
	char dst[PATH_MAX];

	if (str_fmt(dst, sizeof(dst), "%s/%s", etc_path, rel))
		return;
	for (char *p = dst + strlen(etc_path) + 1; (p = strchr(p, '/')); p++) {
		*p = '\0';
		etc_mkdir(dst);
		*p = '/';
	}
}

static int etc_placeholders(void)
{
	static const char passwd[] = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
	static const char group[] = "root:x:0:\nnogroup:x:65534:\n";
	struct buf p = BUF_INIT(PATH_MAX);
	int r = buf_addf(&p, "%s/passwd", etc_path) || etc_write(p.ptr, passwd, sizeof(passwd) - 1);

	buf_reset(&p);
	r = r || buf_addf(&p, "%s/group", etc_path) || etc_write(p.ptr, group, sizeof(group) - 1);
	buf_free(&p);
	return r ? -1 : 0;
}

int etc_build(const char *state_dir, char *err, size_t errlen)
{
	char pattern[PATH_MAX];
	glob_t g;

	etc_entries = 0;
	if (str_fmt(etc_path, sizeof(etc_path), "%s/sandbox-etc", state_dir) ||
	    etc_mkdir(etc_path) || etc_placeholders()) {
		snprintf(err, errlen, "local provider: cannot make %s: %s", etc_path, strerror(errno));
		return -1;
	}
	for (int i = 0; etc_allowed[i]; i++) {
		if (str_fmt(pattern, sizeof(pattern), "%s/%s", ETC_HOST, etc_allowed[i]) || glob(pattern, 0, NULL, &g))
			continue;
		for (size_t k = 0; k < g.gl_pathc; k++) {
			const char *rel = g.gl_pathv[k] + strlen(ETC_HOST) + 1;
			etc_parents(rel);
			etc_copy(rel, true);
		}
		globfree(&g);
	}
	etc_bind_points();
	if (etc_entries > ETC_ENTRIES_MAX)
		log_warn("local", "the sandboxes' /etc stopped at %d entries", ETC_ENTRIES_MAX);
	return 0;
}

/* A name for the sandbox's account: the sbxfs user's, when it is a
 * reasonable login name that does not shadow a system one. */
static const char *etc_account_name(const char *name)
{
	if (!name || !*name || strlen(name) > 32 || name[0] == '-' || (name[0] >= '0' && name[0] <= '9') ||
	    !strcmp(name, "root") || !strcmp(name, "nobody") || !strcmp(name, "nogroup"))
		return "sandbox";
	return name;
}

/* A thread's passwd or group: new for a new thread (nothing reads it before
 * it is bound into the sandbox), created in place; replaced atomically
 * when it is there (a running sandbox may read the old one).  0644 as is:
 * the daemon's umask is 0 (fs/main.c). */
static int etc_write_thread(const char *path, const char *text, size_t len)
{
	return util_write_new(path, text, len, 0644);
}

int etc_write_identity(const char *thread_dir, const char *name, uid_t uid, gid_t gid, bool host_account)
{
	struct buf dir = BUF_INIT(PATH_MAX), path = BUF_INIT(PATH_MAX), text = BUF_INIT(4096);
	const char *acct = etc_account_name(name);
	struct group gr, *grp = NULL;
	char grbuf[4096];
	const char *gname = acct;
	int r = -1;

	if (host_account && gid != 65534 && !getgrgid_r(gid, &gr, grbuf, sizeof(grbuf), &grp) && grp &&
	    strcmp(grp->gr_name, "root") && strlen(grp->gr_name) < 64)
		gname = grp->gr_name; /* users: maps to a host account and its group */
	if (buf_addf(&dir, "%s/etc", thread_dir) || etc_mkdir(dir.ptr) ||
	    buf_addf(&text, "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
			    "%s:x:%u:%u:sbxfs sandbox:/mnt/user-data/workspace:/bin/sh\n",
		    acct, (unsigned)uid, (unsigned)gid) ||
	    buf_addf(&path, "%s/passwd", dir.ptr) || etc_write_thread(path.ptr, text.ptr, text.len))
		goto out;
	buf_reset(&text);
	buf_reset(&path);
	if (buf_addf(&text, "root:x:0:\nnogroup:x:65534:\n%s:x:%u:\n", gname, (unsigned)gid) ||
	    buf_addf(&path, "%s/group", dir.ptr) || etc_write_thread(path.ptr, text.ptr, text.len))
		goto out;
	r = 0;
out:
	buf_free(&dir);
	buf_free(&path);
	buf_free(&text);
	return r;
}
