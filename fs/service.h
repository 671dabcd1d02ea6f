/* SPDX-License-Identifier: MIT */
/*
 * service.h - telling a service manager how the daemon is doing: systemd's
 * notify protocol (sd_notify(3), through libsystemd) on the socket named by
 * NOTIFY_SOCKET.  Without NOTIFY_SOCKET every call is a no-op.
 *
 *   MAINPID=     at once from a daemon that detaches (without -f): it is
 *                not the process its manager started;
 *   READY=1      once the mount answers (a statfs of the mountpoint,
 *                served by the request loop) and adoption is done; with
 *                MAINPID= and STATUS=;
 *   RELOADING=1  when a SIGHUP reload starts, READY=1 when it is over
 *                (applied or refused: STATUS= says which);
 *   STOPPING=1   when shutdown starts (unmount, SIGTERM, SIGINT);
 *   WATCHDOG=1   every WATCHDOG_USEC/2 while a statfs of the mountpoint is
 *                answered, when the manager asks for it (WatchdogSec=):
 *                a request loop that no longer answers stops the pings, and
 *                the manager restarts the daemon, which adopts every
 *                sandbox.
 *
 * Threading: service_start() once, from main, right before the request loop
 * runs; it starts one detached thread (the probe).  The other calls may
 * come from any thread.
 */
#ifndef SBX_SERVICE_H
#define SBX_SERVICE_H

/* In the child that detached: MAINPID=<its pid>, sent before the launcher
 * (the process the manager started) exits, so that a Type=notify unit
 * that runs sbxfs without -f (NotifyAccess=all) follows the daemon
 * instead of failing when its main process exits before READY=1. */
void service_detached(void);
/* Start the probe for mountpoint (an absolute path, copied): READY=1 when
 * it answers, then the watchdog pings.  status: the STATUS= text. */
void service_start(const char *mountpoint, const char *status);
void service_reloading(void);
/* The reload is over; status says how it went. */
void service_reloaded(const char *status);
/* Shutdown begins: STOPPING=1, and the probe stops pinging. */
void service_stopping(void);

#endif
