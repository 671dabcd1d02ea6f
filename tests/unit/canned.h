/* SPDX-License-Identifier: MIT */
/*
 * canned.h - a canned HTTP server for the unit tests (curl's tests/data
 * idea): it answers each request it reads with the next reply of a list,
 * records every request (method, path, headers, body) for the test to
 * check, and counts the connections it accepted.  It listens on a unix
 * socket, or on 127.0.0.1 inside whatever network namespace the thread
 * that created the listening socket was in.
 *
 * Replies are raw HTTP responses.  A reply without Content-Length ends its
 * connection (close-delimited, like Docker's attach stream); "DELAY:<ms>\n"
 * before a reply waits that long first.
 */
#ifndef SBX_CANNED_H
#define SBX_CANNED_H

#include <pthread.h>
#include <stddef.h>

#define CANNED_MAX 16

struct canned {
	int listen_fd;
	const char *replies[CANNED_MAX];
	size_t lens[CANNED_MAX]; /* 0: strlen(reply) (replies holding NUL bytes set it) */
	int n_replies;
	char *requests[CANNED_MAX]; /* "METHOD PATH\r\nheaders\r\n\r\nbody" */
	int n_requests;
	int connections;
	pthread_t thread;
};

/* Serve on listen_fd (already listening) in a thread. */
void canned_start(struct canned *c, int listen_fd);
/* Wait for the thread (it ends after the last reply or when the client
 * closes) and free the recorded requests. */
void canned_stop(struct canned *c);
/* A listening unix socket at path (removed first). */
int canned_unix_listener(const char *path);

#endif
