/* SPDX-License-Identifier: MIT */
/*
 * args.c - the command line (see args.h for what each option becomes).
 *
 * Why sbxfs sorts mount options itself instead of handing them all to
 * libfuse: libfuse refuses options it does not know (nofail, _netdev...),
 * and it would honour `suid` and `dev`, which mount.fuse3 adds to every
 * mount it runs.  A FUSE daemon that works from fstab has to drop the first
 * kind and must not take the second.
 */
#define _GNU_SOURCE
#include "args.h"

#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define ARGS_OPTS_CAP 4096

enum { OPT_CHECK_CONFIG = 256, OPT_IMPORT };

void args_usage(FILE *f)
{
	fprintf(f, "usage: sbxfs [-f] [-d] [-c FILE] [-o OPTIONS] [SOURCE] MOUNTPOINT\n"
		   "       sbxfs --check-config FILE\n"
		   "       sbxfs [-c FILE] --import-deerflow DIR\n"
		   "       sbxfs --help | --version\n"
		   "\n"
		   "  -c, --config FILE      mount.conf (YAML); default " SBXFS_DEFAULT_CONFIG " if it exists\n"
		   "  -o OPTIONS             comma-separated: config=FILE (as -c), FUSE and mount options\n"
		   "                         (ro, noexec, noatime, fsname=...); fstab's generic options\n"
		   "                         (rw, nofail, _netdev, noauto, user, x-systemd.*...) are ignored;\n"
		   "                         allow_other only with allow_other: true in mount.conf\n"
		   "  -f, --foreground       stay in the foreground, log to stderr\n"
		   "  -d, --debug            debug logging (implies -f)\n"
		   "      --check-config FILE\n"
		   "                         validate FILE as a start would, print the effective\n"
		   "                         configuration (secrets as \"***\"); exit 0 or 1\n"
		   "      --import-deerflow DIR\n"
		   "                         move the threads' files of DeerFlow's base dir DIR into\n"
		   "                         state_dir (no daemon may serve it); exit 0 or 1\n"
		   "  -h, --help             this text\n"
		   "  -V, --version          print the version\n"
		   "\n"
		   "SOURCE is what mount(8) passes (by convention \"sbxfs\"); it is not used.\n"
		   "mkdir MOUNTPOINT/<user>/<thread> acquires a sandbox; rmdir releases it.\n"
		   "See sbxfs(8) and sbxfs.conf(5).\n");
}

const char *args_version(void)
{
	return "sbxfs " SBXFS_VERSION;
}

__attribute__((format(printf, 3, 4))) static enum args_action args_fail(char *err, size_t errlen, const char *fmt,
	...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return ARGS_ERROR;
}

/* Options of mount(8), fstab and mount.fuse3 that a FUSE daemon has no use
 * for (mount(8) and mount.fuse3 act on most of them themselves). */
static bool opt_generic(const char *o)
{
	static const char *const words[] = { "defaults", "auto", "noauto", "user", "nouser", "users", "owner",
		"group", "nofail", "_netdev", NULL };

	for (int i = 0; words[i]; i++)
		if (!strcmp(o, words[i]))
			return true;
	return !strncmp(o, "x-", 2) || !strncmp(o, "comment=", 8);
}

/* Implied by every sbxfs mount, or refused on purpose (see args.h). */
static bool opt_implied(const char *o)
{
	static const char *const words[] = { "suid", "dev", "nosuid", "nodev", "default_permissions", NULL };

	for (int i = 0; words[i]; i++)
		if (!strcmp(o, words[i]))
			return true;
	return false;
}

/* The value of an option with `\,` and `\\` unescaped. */
static char *opt_unescape(const char *s, size_t n)
{
	char *out = malloc(n + 1), *p = out;

	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\\' && i + 1 < n)
			i++;
		*p++ = s[i];
	}
	*p = '\0';
	return out;
}

/* One option of -o (raw: still escaped, n bytes). */
static enum args_action opt_one(struct args *a, const char *raw, size_t n, char *err, size_t errlen)
{
	char word[64];

	if (n == 0)
		return ARGS_RUN;
	/* names are short; a long token is a FUSE option with a value */
	snprintf(word, sizeof(word), "%.*s", (int)(n < sizeof(word) ? n : sizeof(word) - 1), raw);
	if (!strncmp(raw, "config=", 7)) {
		char *v = opt_unescape(raw + 7, n - 7);
		if (!v)
			return args_fail(err, errlen, "out of memory");
		if (!v[0]) {
			free(v);
			return args_fail(err, errlen, "-o config=: needs a file name");
		}
		free(a->config_opt);
		a->config_opt = v;
		return ARGS_RUN;
	}
	if (n < sizeof(word) && (opt_generic(word) || opt_implied(word)))
		return ARGS_RUN;
	if (n < sizeof(word) && !strcmp(word, "allow_other")) {
		a->allow_other = true;
		return ARGS_RUN;
	}
	if (!strncmp(raw, "subtype=", 8))
		return args_fail(err, errlen, "-o subtype=: an sbxfs mount is always of type fuse.sbxfs");
	if ((a->fuse_opts.len && buf_adds(&a->fuse_opts, ",")) || buf_add(&a->fuse_opts, raw, n))
		return args_fail(err, errlen, "-o: options too long");
	return ARGS_RUN;
}

/* Split one -o argument at the commas that are not escaped. */
static enum args_action opt_list(struct args *a, const char *s, char *err, size_t errlen)
{
	const char *start = s;

	for (const char *p = s;; p++) {
		if (*p == '\\' && p[1]) {
			p++;
			continue;
		}
		if (*p == ',' || *p == '\0') {
			if (opt_one(a, start, (size_t)(p - start), err, errlen) == ARGS_ERROR)
				return ARGS_ERROR;
			if (*p == '\0')
				return ARGS_RUN;
			start = p + 1;
		}
	}
}

enum args_action args_parse(int argc, char **argv, struct args *a, char *err, size_t errlen)
{
	static const struct option longopts[] = { { "config", required_argument, NULL, 'c' },
		{ "foreground", no_argument, NULL, 'f' }, { "debug", no_argument, NULL, 'd' },
		{ "check-config", required_argument, NULL, OPT_CHECK_CONFIG },
		{ "import-deerflow", required_argument, NULL, OPT_IMPORT }, { "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' }, { NULL, 0, NULL, 0 } };
	const char *check = NULL, *copt = NULL;
	int c, npos;

	memset(a, 0, sizeof(*a));
	buf_init(&a->fuse_opts, ARGS_OPTS_CAP);
	err[0] = '\0';
	optind = 0; /* GNU: start afresh (unit tests parse several times) */
	while ((c = getopt_long(argc, argv, "c:fdho:V", longopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			copt = optarg;
			break;
		case 'f':
			a->foreground = true;
			break;
		case 'd':
			a->debug = a->foreground = true;
			break;
		case 'o':
			if (opt_list(a, optarg, err, errlen) == ARGS_ERROR)
				return ARGS_ERROR;
			break;
		case OPT_CHECK_CONFIG:
			check = optarg;
			break;
		case OPT_IMPORT:
			a->import_dir = optarg;
			break;
		case 'h':
			return ARGS_HELP;
		case 'V':
			return ARGS_VERSION;
		default:
			return args_fail(err, errlen, "unknown option or missing argument (see sbxfs --help)");
		}
	}
	npos = argc - optind;
	if (copt && a->config_opt && strcmp(copt, a->config_opt))
		return args_fail(err, errlen, "-c %s and -o config=%s name different files", copt, a->config_opt);
	a->config = copt ? copt : a->config_opt;
	if (a->import_dir) {
		if (npos != 0 || check || !a->import_dir[0])
			return args_fail(err, errlen, "--import-deerflow DIR takes only -c FILE, no mountpoint");
		return ARGS_IMPORT;
	}
	if (check) {
		if (npos != 0 || a->config)
			return args_fail(err, errlen, "--check-config FILE takes no other file or mountpoint");
		a->config = check;
		return ARGS_CHECK_CONFIG;
	}
	if (npos == 1) {
		a->mountpoint = argv[optind];
	} else if (npos == 2) {
		a->source = argv[optind];
		a->mountpoint = argv[optind + 1];
	} else {
		return args_fail(err, errlen, npos ? "too many operands: expected [SOURCE] MOUNTPOINT"
						   : "no mountpoint given");
	}
	if (!a->mountpoint[0])
		return args_fail(err, errlen, "the mountpoint is an empty string");
	return ARGS_RUN;
}

void args_free(struct args *a)
{
	buf_free(&a->fuse_opts);
	free(a->config_opt);
	a->config_opt = NULL;
	a->config = NULL;
}
