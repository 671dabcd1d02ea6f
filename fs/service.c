/* SPDX-License-Identifier: MIT */
/*
 * service.c - systemd's notify protocol (see service.h).
 *
 * Why libsystemd and not the protocol by hand: sd_notify(3) documents the
 * protocol as stable and small, but the project takes the libraries it
 * needs from Debian rather than re-writing them (DESIGN §1), and libsystemd0
 * is on every Debian host already.
 *
 * Why READY=1 waits for a statfs of the mountpoint: the daemon mounts before
 * its request loop runs, and until the loop has answered the kernel's INIT
 * every access to the mount blocks.  A statfs goes to the daemon (the kernel
 * does not answer it from a cache), so when it returns the loop is serving;
 * adoption (pool_init) is done before the loop starts.  The same request
 * checks the loop in the watchdog: it needs a free request worker, so a loop
 * whose workers are all stuck stops the pings.
 *
 * The probe thread is detached and never joined: at shutdown a statfs may
 * wait until the mount is gone, and the daemon must not wait for it.
 */
#define _GNU_SOURCE
#include "service.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include "../common/log.h"

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stopping; /* protected by lock */
	bool ready;    /* protected by lock: READY=1 was sent */
	char *mountpoint;
	char *status;
} svc = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static bool service_wanted(void)
{
	const char *s = getenv("NOTIFY_SOCKET");

	return s && *s;
}

static void service_send(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void service_send(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	int r;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	r = sd_notify(0, msg);
	if (r < 0)
		log_warn("daemon", "sd_notify(%.*s): %s", (int)strcspn(msg, "\n"), msg, strerror(-r));
}

static uint64_t service_monotonic_usec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Wait up to usec, or until stopping.  Returns true when stopping. */
static bool service_sleep(uint64_t usec)
{
	struct timespec until;
	bool stop;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += (time_t)(usec / 1000000u);
	until.tv_nsec += (long)(usec % 1000000u) * 1000;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&svc.lock);
	while (!svc.stopping && pthread_cond_timedwait(&svc.cond, &svc.lock, &until) != ETIMEDOUT)
		;
	stop = svc.stopping;
	pthread_mutex_unlock(&svc.lock);
	return stop;
}

/* Reload notices only between READY=1 and STOPPING=1. */
static bool service_is_serving(void)
{
	bool serving;

	pthread_mutex_lock(&svc.lock);
	serving = svc.ready && !svc.stopping;
	pthread_mutex_unlock(&svc.lock);
	return serving;
}

static bool service_is_stopping(void)
{
	bool stop;

	pthread_mutex_lock(&svc.lock);
	stop = svc.stopping;
	pthread_mutex_unlock(&svc.lock);
	return stop;
}

/* Does the mount answer?  Blocks while the request loop does not. */
static bool service_mount_answers(void)
{
	struct statvfs sv;

	return statvfs(svc.mountpoint, &sv) == 0;
}

static void *service_main(void *arg)
{
	uint64_t wd_usec = 0;
	int tries = 0;

	(void)arg;
	while (!service_mount_answers()) {
		if (service_is_stopping())
			return NULL;
		if (++tries == 50)
			log_warn("daemon", "%s does not answer a statfs yet: %s", svc.mountpoint, strerror(errno));
		if (service_sleep(100000))
			return NULL;
	}
	if (service_is_stopping())
		return NULL;
	service_send("READY=1\nMAINPID=%d\nSTATUS=%s", (int)getpid(), svc.status);
	pthread_mutex_lock(&svc.lock);
	svc.ready = true;
	pthread_mutex_unlock(&svc.lock);
	if (sd_watchdog_enabled(0, &wd_usec) <= 0 || wd_usec == 0)
		return NULL;
	log_info("daemon", "watchdog: a statfs of %s every %llu ms", svc.mountpoint,
		(unsigned long long)(wd_usec / 2000));
	while (!service_sleep(wd_usec / 2)) {
		if (service_mount_answers() && !service_is_stopping())
			service_send("WATCHDOG=1");
	}
	return NULL;
}

void service_start(const char *mountpoint, const char *status)
{
	pthread_attr_t attr;
	pthread_t t;
	int err;

	if (!service_wanted())
		return;
	svc.mountpoint = strdup(mountpoint);
	svc.status = strdup(status ? status : "");
	if (!svc.mountpoint || !svc.status) {
		log_err("daemon", "cannot start the service notifier: out of memory");
		return;
	}
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 128 * 1024);
	err = pthread_create(&t, &attr, service_main, NULL);
	pthread_attr_destroy(&attr);
	if (err)
		log_err("daemon", "cannot start the service notifier: %s", strerror(err));
}

void service_detached(void)
{
	if (service_wanted())
		service_send("MAINPID=%d", (int)getpid());
}

void service_reloading(void)
{
	if (service_wanted() && service_is_serving())
		service_send("RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading the configuration",
			(unsigned long long)service_monotonic_usec());
}

void service_reloaded(const char *status)
{
	if (service_wanted() && service_is_serving())
		service_send("READY=1\nSTATUS=%s", status);
}

void service_stopping(void)
{
	pthread_mutex_lock(&svc.lock);
	svc.stopping = true;
	pthread_cond_broadcast(&svc.cond);
	pthread_mutex_unlock(&svc.lock);
	if (service_wanted())
		service_send("STOPPING=1\nSTATUS=shutting down");
}
