/* SPDX-License-Identifier: MIT */
/*
 * jobfs.h - the FUSE glue of jobs/ (the nodes N_JOBS, N_JOB, N_JOBFILE).
 */
#ifndef SBX_JOBFS_H
#define SBX_JOBFS_H

/* Register the job node kinds and start the job event thread. 0 or errno. */
int jobfs_init(void);
/* Stop the event thread, answer every parked reader. */
void jobfs_shutdown(void);

#endif
