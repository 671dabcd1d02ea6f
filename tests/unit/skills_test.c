/* SPDX-License-Identifier: MIT */
/*
 * skills_test.c - unit tests of the skill projection: the manifest (kinds,
 * hashes reused while a file's stat is unchanged, the symlink rule,
 * limits), the diff and what a partly failed sync leaves, persistence; then
 * the engine over the pool and the fault provider, whose skills ops write
 * into a local directory playing the sandbox and count every call: a
 * 445-file tree uploads 445 files once, one changed file uploads exactly
 * one, removals propagate, a failing server leaves the sync pending and the
 * next one completes it, a restart (adoption) uploads nothing again.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../common/config.h"
#include "../../common/layout.h"
#include "../../common/log.h"
#include "../../common/util.h"
#include "../../fs/fsbx.h"
#include "../../fs/fspark.h"
#include "../../runtime/work.h"
#include "../../providers/pool.h"
#include "../../skills/manifest.h"
#include "../../skills/skills.h"
#include "check.h"
#include "fault.h"

static char base[128];

#define TOP_SHA "f7de2947c64cb6435e15fb2bef359d1ed5f6356b2aebb7b20535e3772904e6db"

static void put(const char *dir, const char *rel, const char *text)
{
	char p[512];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	f = fopen(p, "w");
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

static void mk(const char *dir, const char *rel)
{
	char p[512];

	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	util_mkdir_p(p, 0755);
}

static const struct skills_ent *find(const struct skills_manifest *m, const char *path)
{
	for (size_t i = 0; i < m->n; i++)
		if (!strcmp(m->e[i].path, path))
			return &m->e[i];
	return NULL;
}

static size_t count_ops(const struct skills_op *v, size_t n, enum skills_op_kind k)
{
	size_t c = 0;

	for (size_t i = 0; i < n; i++)
		c += v[i].kind == k;
	return c;
}

/* ---- manifest and diff ---------------------------------------------------------- */

static void test_manifest(void)
{
	char tree[256], p[512];
	struct skills_manifest a, b, r;
	struct skills_scan_result res;
	struct skills_limits lim = { 0 };
	struct skills_op *v = NULL;
	size_t n = 0;

	snprintf(tree, sizeof(tree), "%s/tree", base);
	mk(tree, "pdf/scripts");
	put(tree, "pdf/SKILL.md", "# pdf\n");
	put(tree, "pdf/scripts/run.sh", "echo hi\n");
	put(tree, "top.txt", "top\n");
	snprintf(p, sizeof(p), "%s/pdf/link", tree);
	CHECK(symlink("SKILL.md", p) == 0);
	snprintf(p, sizeof(p), "%s/pdf/abs", tree);
	CHECK(symlink("/etc/passwd", p) == 0);
	snprintf(p, sizeof(p), "%s/pdf/up", tree);
	CHECK(symlink("../../x", p) == 0);
	snprintf(p, sizeof(p), "%s/dirlink", tree);
	CHECK(symlink("pdf", p) == 0);

	CHECK(skills_manifest_scan(tree, NULL, &lim, true, &a, &res) == 0);
	CHECK(a.n == 6 && a.files == 4 && a.dirs == 2); /* pdf pdf/SKILL.md pdf/link pdf/scripts .../run.sh top.txt */
	CHECK(res.refused == 3); /* abs, up, dirlink */
	CHECK(find(&a, "pdf/link") && find(&a, "pdf/link")->kind == SK_LINK &&
	      !strcmp(find(&a, "pdf/link")->sha, find(&a, "pdf/SKILL.md")->sha));
	/* sha256("top\n") */
	CHECK(!strcmp(find(&a, "top.txt")->sha, TOP_SHA));

	/* the diff from nothing: directories parents first, then every file */
	skills_manifest_init(&b);
	CHECK(skills_diff(&b, &a, &v, &n) == 0);
	CHECK(n == 6 && count_ops(v, n, SKOP_MKDIR) == 2 && count_ops(v, n, SKOP_UPLOAD) == 4);
	CHECK(v[0].kind == SKOP_MKDIR && !strcmp(v[0].path, "pdf") && !strcmp(v[1].path, "pdf/scripts"));
	free(v);

	/* unchanged: nothing to do, and no file is read again (hashes reused) */
	CHECK(skills_manifest_scan(tree, &a, &lim, true, &b, &res) == 0);
	CHECK(skills_diff(&a, &b, &v, &n) == 0 && n == 0);
	free(v);
	skills_manifest_free(&b);

	/* one file changes, one goes, a directory goes, a file becomes a directory */
	put(tree, "pdf/SKILL.md", "# pdf v2\n");
	snprintf(p, sizeof(p), "%s/pdf/scripts", tree);
	util_rm_rf(p);
	snprintf(p, sizeof(p), "%s/top.txt", tree);
	unlink(p);
	mk(tree, "top.txt");
	put(tree, "top.txt/inner", "i\n");
	CHECK(skills_manifest_scan(tree, &a, &lim, true, &b, &res) == 0);
	CHECK(skills_diff(&a, &b, &v, &n) == 0);
	/* remove pdf/scripts (not its file again), remove top.txt; mkdir top.txt;
	 * upload pdf/SKILL.md, pdf/link (same new content), top.txt/inner */
	CHECK(count_ops(v, n, SKOP_REMOVE) == 2 && count_ops(v, n, SKOP_MKDIR) == 1 && count_ops(v, n, SKOP_UPLOAD) == 3);
	CHECK(v[0].kind == SKOP_REMOVE && v[n - 1].kind == SKOP_UPLOAD);

	/* a sync where the uploads failed: the sandbox has the old SKILL.md */
	for (size_t i = 0; i < n; i++)
		v[i].done = v[i].kind != SKOP_UPLOAD;
	CHECK(skills_manifest_result(&a, &b, v, n, &r) == 0);
	CHECK(find(&r, "pdf/SKILL.md") && !strcmp(find(&r, "pdf/SKILL.md")->sha, find(&a, "pdf/SKILL.md")->sha));
	CHECK(!find(&r, "pdf/scripts") && !find(&r, "pdf/scripts/run.sh") && !find(&r, "top.txt/inner"));
	CHECK(find(&r, "top.txt") && find(&r, "top.txt")->kind == SK_DIR);
	free(v);
	/* the next diff redoes exactly what failed */
	CHECK(skills_diff(&r, &b, &v, &n) == 0 && n == 3 && count_ops(v, n, SKOP_UPLOAD) == 3);
	free(v);

	/* persistence: only for the same remote sandbox */
	snprintf(p, sizeof(p), "%s/m.json", base);
	CHECK(skills_manifest_save(p, "remote-1", &b) == 0);
	skills_manifest_free(&r);
	CHECK(skills_manifest_load(p, "remote-2", &r) == -1 && r.n == 0);
	CHECK(skills_manifest_load(p, "remote-1", &r) == 0 && r.n == b.n && r.bytes == b.bytes);
	CHECK(skills_diff(&r, &b, &v, &n) == 0 && n == 0);
	free(v);
	skills_manifest_free(&r);

	/* limits */
	lim.max_file = 4;
	CHECK(skills_manifest_scan(tree, NULL, &lim, false, &r, &res) == -1 && res.err == EFBIG);
	skills_manifest_free(&r);
	lim.max_file = 0;
	lim.max_files = 2;
	CHECK(skills_manifest_scan(tree, NULL, &lim, false, &r, &res) == -1 && res.err == ENOSPC);
	skills_manifest_free(&r);
	lim.max_files = 0;
	lim.max_total = 10;
	CHECK(skills_manifest_scan(tree, NULL, &lim, false, &r, &res) == -1 && res.err == ENOSPC);
	skills_manifest_free(&r);

	skills_manifest_free(&a);
	skills_manifest_free(&b);

	CHECK(skills_link_inside("", "a/b") && skills_link_inside("a/b", "../../c") && !skills_link_inside("a", "../../c"));
	CHECK(!skills_link_inside("", "/x") && !skills_link_inside("", "..") && skills_link_inside("a", "./../b/./c"));
	CHECK(!skills_link_inside("a", "b/../../../c") && !skills_link_inside("", ""));
}

/* ---- the engine ---------------------------------------------------------------------- */

static char state_dir[200], remote[200], skills_dir[400];

static int engine_setup(bool fresh)
{
	struct sbx_config *cfg;
	char err[512], path[300], text[600];
	FILE *f;

	snprintf(path, sizeof(path), "%s/mount.conf", base);
	snprintf(text, sizeof(text), "use: fault\nstate_dir: %s\nidle_timeout: 0\npool: {prewarm: 0}\n", state_dir);
	f = fopen(path, "w");
	if (!f)
		return -1;
	fputs(text, f);
	fclose(f);
	if (fresh)
		fault_reset();
	snprintf(fault.remote_root, sizeof(fault.remote_root), "%s", remote);
	cfg = config_load(path, err, sizeof(err));
	if (!cfg || skills_init()) {
		fprintf(stderr, "setup: %s\n", err);
		config_put(cfg);
		return -1;
	}
	if (pool_init(cfg, err, sizeof(err))) {
		fprintf(stderr, "pool_init: %s\n", err);
		config_put(cfg);
		return -1;
	}
	config_put(cfg);
	return 0;
}

static void engine_teardown(bool keep)
{
	skills_drain();
	work_shutdown();
	pool_shutdown(keep);
	skills_shutdown();
	pool_clear();
}

/* Wait (bounded) until the sandbox's status says generation_synced ==
 * generation_written and not syncing. */
static bool wait_synced(struct sbx *s)
{
	for (int i = 0; i < 3000; i++) {
		struct buf st = BUF_INIT(BUF_CAP_JSON);
		bool ok = !pool_status_json(s, &st) && strstr(buf_str(&st), "\"state\": \"synced\"");
		buf_free(&st);
		if (ok)
			return true;
		usleep(5000);
	}
	return false;
}

static bool status_has(struct sbx *s, const char *needle)
{
	struct buf st = BUF_INIT(BUF_CAP_JSON);
	bool ok = !pool_status_json(s, &st) && strstr(buf_str(&st), needle);

	buf_free(&st);
	return ok;
}

static void test_engine(void)
{
	struct skills_stats ks;
	struct sbx *s;
	char p[600], rp[600];
	int up;

	snprintf(state_dir, sizeof(state_dir), "%s/state", base);
	snprintf(remote, sizeof(remote), "%s/remote", base);
	mk(remote, "");
	if (engine_setup(true)) {
		CHECK(!"engine setup");
		return;
	}
	CHECK(pool_acquire("u", "t", &s) == 0);
	/* a new sandbox with an empty projection: nothing to upload */
	CHECK(fault.uploads == 0 && fault.skill_mkdirs == 0 && status_has(s, "\"generation_synced\": 1"));
	snprintf(skills_dir, sizeof(skills_dir), "%s/users/u/threads/t/skills", state_dir);
	/* 445 files in 15 skills of 3 directories each */
	for (int k = 0; k < 15; k++)
		for (int d = 0; d < 3; d++) {
			char rel[64];
			snprintf(rel, sizeof(rel), "skill%02d/d%d", k, d);
			mk(skills_dir, rel);
		}
	for (int i = 0; i < 445; i++) {
		char rel[64], text[64];
		snprintf(rel, sizeof(rel), "skill%02d/d%d/f%03d.md", i % 15, (i / 15) % 3, i);
		snprintf(text, sizeof(text), "file %d\n", i);
		put(skills_dir, rel, text);
	}
	skills_changed(s);
	CHECK(wait_synced(s));
	CHECK(fault.uploads == 445 && fault.skill_mkdirs == 15 + 45);
	snprintf(rp, sizeof(rp), "%s/mnt/skills/skill03/d1/f108.md", remote);
	CHECK(access(rp, F_OK) == 0);

	/* one changed file uploads exactly one file */
	up = fault.uploads;
	put(skills_dir, "skill03/d1/f108.md", "changed\n");
	skills_changed(s);
	CHECK(wait_synced(s));
	CHECK(fault.uploads == up + 1);
	/* the same bytes written again: no upload */
	put(skills_dir, "skill03/d1/f108.md", "changed\n");
	skills_changed(s);
	CHECK(wait_synced(s) && fault.uploads == up + 1);

	/* removals propagate: a file, then a whole skill with one call */
	snprintf(p, sizeof(p), "%s/skill00/d0/f000.md", skills_dir);
	unlink(p);
	snprintf(p, sizeof(p), "%s/skill01", skills_dir);
	util_rm_rf(p);
	skills_changed(s);
	CHECK(wait_synced(s) && fault.skill_removes == 2);
	snprintf(rp, sizeof(rp), "%s/mnt/skills/skill01", remote);
	CHECK(access(rp, F_OK) == -1);

	/* a failing server: the sync stays pending with the error, then completes */
	fault.files_err = SBX_ERR_IO;
	put(skills_dir, "skill02/new.md", "new\n");
	skills_changed(s);
	for (int i = 0; i < 2000 && !status_has(s, "\"state\": \"error\""); i++)
		usleep(5000);
	CHECK(status_has(s, "\"state\": \"error\"") && status_has(s, "upload skills/skill02/new.md"));
	up = fault.uploads;
	fault.files_err = SBX_OK;
	CHECK(wait_synced(s)); /* the retry (back-off 1 s) */
	CHECK(fault.uploads == up + 1 && status_has(s, "\"last_error\": null"));

	/* rmdir drains: a change still in its debounce reaches the sandbox before release */
	put(skills_dir, "skill02/late.md", "late\n");
	skills_changed(s);
	up = fault.uploads;
	CHECK(pool_release(s) == 0);
	CHECK(fault.uploads == up + 1);
	pool_put(s);

	skills_stats(&ks);
	CHECK(ks.syncs >= 6 && ks.sync_failures >= 1 && ks.files_uploaded >= 448);

	/* a restart with the sandbox kept: adoption uploads nothing again */
	engine_teardown(true);
	up = fault.uploads;
	if (engine_setup(false)) {
		CHECK(!"engine setup again");
		return;
	}
	CHECK(pool_acquire("u", "t", &s) == 0);
	CHECK(wait_synced(s));
	CHECK(fault.uploads == up);
	pool_put(s);
	engine_teardown(false);
}

int main(void)
{
	log_open(0, getenv("SBXFS_UNIT_DEBUG") != NULL);
	if (!getenv("SBXFS_UNIT_DEBUG"))
		log_set_min_level(LOG_LVL_ERR + 1);
	config_set_hooks(&provider_config_hooks);
	snprintf(base, sizeof(base), "/tmp/sbxfs-unit-skills-XXXXXX");
	fs_sbx_setup();
	if (!mkdtemp(base) || fspark_init())
		return 2;
	test_manifest();
	test_engine();
	park_shutdown();
	util_rm_rf(base);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
