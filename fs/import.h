/* SPDX-License-Identifier: MIT */
/*
 * import.h - `sbxfs --import-deerflow DIR`: the files of DeerFlow's threads
 * moved into state_dir, once, before sbxfs serves them (import.c says how).
 */
#ifndef SBX_IMPORT_H
#define SBX_IMPORT_H

#include "../common/config.h"

/* Move every thread's user-data/{workspace,uploads,outputs} from the DeerFlow
 * base dir `dir` (DEER_FLOW_HOME, or backend/.deer-flow) into cfg->state_dir.
 * The caller holds the state_dir lock (no daemon serves it).  One line per
 * thread on stdout, the causes of what was left on stderr.  Returns the exit
 * status: 0 everything found was imported, 1 something was left or failed. */
int import_deerflow(const struct sbx_config *cfg, const char *dir);

#endif
