/* SPDX-License-Identifier: MIT */
/*
 * handle.c - the registry of open virtual handles (see handle.h for why
 * handles are retired rather than freed at RELEASE).
 */
#define _GNU_SOURCE
#include "handle.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "../common/util.h"

#define HANDLE_GRACE_MS 10000

struct handle {
	struct handle *prev, *next; /* protected by handles_lock */
	void (*clean)(void *p);
	uint64_t retired_ms; /* 0 while open */
	max_align_t payload[];
};

static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static struct handle live = { &live, &live, NULL, 0 }, retired = { &retired, &retired, NULL, 0 };

static void handle_unlink(struct handle *h)
{
	h->prev->next = h->next;
	h->next->prev = h->prev;
}

static void handle_append(struct handle *list, struct handle *h)
{
	h->prev = list->prev;
	h->next = list;
	list->prev->next = h;
	list->prev = h;
}

static struct handle *handle_of(void *p)
{
	return (struct handle *)((char *)p - offsetof(struct handle, payload));
}

static void handle_destroy(struct handle *h)
{
	if (h->clean)
		h->clean(h->payload);
	free(h);
}

void *handle_alloc(size_t size, void (*clean)(void *p))
{
	struct handle *h = calloc(1, sizeof(*h) + size);

	if (!h)
		return NULL;
	h->clean = clean;
	pthread_mutex_lock(&handles_lock);
	handle_append(&live, h);
	pthread_mutex_unlock(&handles_lock);
	return h->payload;
}

void handle_discard(void *p)
{
	struct handle *h = handle_of(p);

	pthread_mutex_lock(&handles_lock);
	handle_unlink(h);
	pthread_mutex_unlock(&handles_lock);
	handle_destroy(h);
}

void handle_retire(void *p)
{
	struct handle *h = handle_of(p), *done = NULL;
	uint64_t now = util_now_ms();

	pthread_mutex_lock(&handles_lock);
	handle_unlink(h);
	h->retired_ms = now;
	handle_append(&retired, h);
	while (retired.next != &retired && retired.next->retired_ms + HANDLE_GRACE_MS < now) {
		struct handle *x = retired.next;
		handle_unlink(x);
		x->next = done;
		done = x;
	}
	pthread_mutex_unlock(&handles_lock);
	while (done) {
		struct handle *x = done;
		done = x->next;
		handle_destroy(x);
	}
}

void handle_free_all(void)
{
	struct handle *lists[] = { &live, &retired };

	pthread_mutex_lock(&handles_lock);
	for (int i = 0; i < 2; i++)
		while (lists[i]->next != lists[i]) {
			struct handle *x = lists[i]->next;
			handle_unlink(x);
			handle_destroy(x);
		}
	pthread_mutex_unlock(&handles_lock);
}
