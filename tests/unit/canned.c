/* SPDX-License-Identifier: MIT */
/* canned.c - the unit tests' canned HTTP server (canned.h). */
#define _GNU_SOURCE
#include "canned.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int canned_unix_listener(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	unlink(path);
	strncpy(a.sun_path, path, sizeof(a.sun_path) - 1);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 8)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* One request from fd into a malloc'd string; NULL at EOF. */
static char *read_request(int fd)
{
	size_t cap = 1 << 16, len = 0, want = 0;
	char *b = malloc(cap + 1), *end;

	if (!b)
		return NULL;
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 5000) <= 0)
			break;
		ssize_t n = read(fd, b + len, cap - len);
		if (n <= 0)
			break;
		len += (size_t)n;
		b[len] = '\0';
		end = strstr(b, "\r\n\r\n");
		if (!end)
			continue;
		if (!want) {
			const char *cl = strcasestr(b, "\r\nContent-Length:");
			want = (size_t)(end - b) + 4 + (cl && cl < end ? strtoul(cl + 17, NULL, 10) : 0);
		}
		if (len >= want)
			return b;
	}
	free(b);
	return NULL;
}

static void *serve(void *arg)
{
	struct canned *c = arg;
	int next = 0;

	while (next < c->n_replies) {
		int fd = accept4(c->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			break;
		c->connections++;
		while (next < c->n_replies) {
			char *rq = read_request(fd);
			size_t len = c->lens[next];
			const char *reply = c->replies[next++];
			if (!rq)
				break;
			if (c->n_requests < CANNED_MAX)
				c->requests[c->n_requests++] = rq;
			else
				free(rq);
			if (!strncmp(reply, "DELAY:", 6)) {
				usleep((useconds_t)strtoul(reply + 6, NULL, 10) * 1000);
				reply = strchr(reply, '\n') + 1;
			}
			if (write(fd, reply, len ? len : strlen(reply)) < 0)
				break;
			if (!strcasestr(reply, "Content-Length:"))
				break; /* close-delimited */
		}
		close(fd);
	}
	return NULL;
}

void canned_start(struct canned *c, int listen_fd)
{
	c->listen_fd = listen_fd;
	c->n_requests = 0;
	c->connections = 0;
	pthread_create(&c->thread, NULL, serve, c);
}

void canned_stop(struct canned *c)
{
	shutdown(c->listen_fd, SHUT_RDWR); /* wakes a blocked accept */
	pthread_join(c->thread, NULL);
	close(c->listen_fd);
	for (int i = 0; i < c->n_requests; i++)
		free(c->requests[i]);
	c->n_requests = 0;
}
