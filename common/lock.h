/* SPDX-License-Identifier: MIT */
/*
 * lock.h - mutexes that know their owner, for assertions in debug builds.
 *
 * The lock order of the whole daemon is written in one place,
 * docs/architecture.md ("Lock order"); headers point there instead of
 * repeating it.  What this header adds is a check of the comments that say
 * "called with X held" (or "with no lock held"): a struct lock is a
 * pthread mutex plus the thread that holds it, and lock_assert_held() /
 * lock_assert_not_held() abort with the caller's file and line when the
 * comment is wrong.
 *
 * The owner is recorded only when SBXFS_LOCK_DEBUG is defined (make asan,
 * make tsan-unit and the unit tests' builds define it); elsewhere a struct
 * lock is a bare mutex and the assertions compile to nothing, so the
 * release build pays nothing.  The owner field is an atomic: reading it
 * from another thread (not_held) is not a data race.
 *
 * lock_acquire()/lock_release() take and let go of it; lock_mutex() gives the underlying pthread mutex for condition variables:
 * wait with lock_cond_wait() so the owner is cleared while the thread
 * sleeps and set again when it wakes.
 */
#ifndef SBX_LOCK_H
#define SBX_LOCK_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef SBXFS_LOCK_DEBUG
#include <stdatomic.h>
#endif

struct lock {
	pthread_mutex_t m;
#ifdef SBXFS_LOCK_DEBUG
	_Atomic(pthread_t) owner; /* 0 when free */
#endif
};

#ifdef SBXFS_LOCK_DEBUG
#define LOCK_INIT { PTHREAD_MUTEX_INITIALIZER, 0 }
#else
#define LOCK_INIT { PTHREAD_MUTEX_INITIALIZER }
#endif

static inline void lock_init(struct lock *l)
{
	pthread_mutex_init(&l->m, NULL);
#ifdef SBXFS_LOCK_DEBUG
	atomic_store(&l->owner, (pthread_t)0);
#endif
}

static inline void lock_destroy(struct lock *l)
{
	pthread_mutex_destroy(&l->m);
}

static inline pthread_mutex_t *lock_mutex(struct lock *l)
{
	return &l->m;
}

#ifdef SBXFS_LOCK_DEBUG
static inline void lock_fail(const char *what, const char *file, int line)
{
	fprintf(stderr, "%s:%d: lock assertion failed: %s\n", file, line, what);
	abort();
}

static inline void lock_acquire_at(struct lock *l, const char *file, int line)
{
	if (atomic_load(&l->owner) == pthread_self())
		lock_fail("taken twice by one thread", file, line);
	pthread_mutex_lock(&l->m);
	atomic_store(&l->owner, pthread_self());
}

static inline void lock_release_at(struct lock *l, const char *file, int line)
{
	if (atomic_load(&l->owner) != pthread_self())
		lock_fail("released by a thread that does not hold it", file, line);
	atomic_store(&l->owner, (pthread_t)0);
	pthread_mutex_unlock(&l->m);
}

static inline int lock_cond_wait_at(pthread_cond_t *c, struct lock *l, const char *file, int line)
{
	int rc;

	if (atomic_load(&l->owner) != pthread_self())
		lock_fail("condition wait without the lock", file, line);
	atomic_store(&l->owner, (pthread_t)0);
	rc = pthread_cond_wait(c, &l->m);
	atomic_store(&l->owner, pthread_self());
	return rc;
}

static inline int lock_cond_timedwait_at(pthread_cond_t *c, struct lock *l, const struct timespec *ts,
	const char *file, int line)
{
	int rc;

	if (atomic_load(&l->owner) != pthread_self())
		lock_fail("condition wait without the lock", file, line);
	atomic_store(&l->owner, (pthread_t)0);
	rc = pthread_cond_timedwait(c, &l->m, ts);
	atomic_store(&l->owner, pthread_self());
	return rc;
}

#define lock_acquire(l) lock_acquire_at((l), __FILE__, __LINE__)
#define lock_release(l) lock_release_at((l), __FILE__, __LINE__)
#define lock_cond_wait(c, l) lock_cond_wait_at((c), (l), __FILE__, __LINE__)
#define lock_cond_timedwait(c, l, ts) lock_cond_timedwait_at((c), (l), (ts), __FILE__, __LINE__)
#define lock_assert_held(l) \
	do { \
		if (atomic_load(&(l)->owner) != pthread_self()) \
			lock_fail("not held by this thread: " #l, __FILE__, __LINE__); \
	} while (0)
#define lock_assert_not_held(l) \
	do { \
		if (atomic_load(&(l)->owner) == pthread_self()) \
			lock_fail("held by this thread: " #l, __FILE__, __LINE__); \
	} while (0)
#else
#define lock_acquire(l) pthread_mutex_lock(&(l)->m)
#define lock_release(l) pthread_mutex_unlock(&(l)->m)
#define lock_cond_wait(c, l) pthread_cond_wait((c), &(l)->m)
#define lock_cond_timedwait(c, l, ts) pthread_cond_timedwait((c), &(l)->m, (ts))
#define lock_assert_held(l) ((void)(l))
#define lock_assert_not_held(l) ((void)(l))
#endif

#endif
