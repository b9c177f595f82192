/*
 * conns.h — the server's register of open connections and the absolute read deadline.
 *
 * libmicrohttpd's connection timeout restarts on every byte, so a client that trickles a header
 * byte now and then holds its connection (and, with thread per connection, a thread) for ever.
 * This register gives every request an absolute deadline instead: its headers and body must have
 * arrived within read_timeout_s of the moment it started — the connection's accept for the first
 * request, the first new byte after the previous response for a kept-alive connection (seen
 * through TCP_INFO's byte counter, so an idle kept-alive connection is left to the idle timeout).
 * A reaper thread checks every 100 ms and shuts the socket down (libmicrohttpd then closes it and
 * frees its thread). While a request is being answered it has no deadline (streams run long).
 *
 * Each record also carries the current request's access-log fields (http.c fills them).
 * Threads: the connection callbacks (libmicrohttpd's threads), the handlers and the reaper all
 * take the register's mutex; a record lives from the STARTED to the CLOSED notification, and
 * the reaper touches its socket only under the mutex, so never after libmicrohttpd closed it.
 */
#ifndef NX_SERVER_CONNS_H
#define NX_SERVER_CONNS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include "core/error.h"

/* What one request did, for its access-log line. */
typedef struct nx_access {
    int      status;            /* HTTP status queued (0: none) */
    uint64_t bytes;             /* response body bytes handed out */
    int      prompt_tokens, gen_tokens;
    uint64_t draft_n, draft_accepted;
    bool     has_tokens;        /* a completion: the token fields mean something */
    char     error[160];        /* the error message of an error response */
} nx_access;

typedef enum nx_conn_phase {
    NX_CONN_READING = 0,        /* a request is arriving: the deadline runs */
    NX_CONN_BUSY,               /* the request is complete and being answered */
    NX_CONN_IDLE,               /* kept alive between requests */
} nx_conn_phase;

typedef struct nx_conn {
    struct nx_conn *prev, *next;
    int      fd;
    char     addr[64];          /* the client's address as text */
    nx_conn_phase phase;
    double   t_start;           /* when the current request started to arrive */
    uint64_t rx_idle;           /* TCP bytes received when it went idle */
    bool     killed;            /* the reaper shut it down */
    nx_access acc;
    struct nx_conns *owner;     /* the register it is in */
} nx_conn;

typedef struct nx_conns {
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    nx_conn *head;
    int      n;
    double   read_timeout_s;    /* <= 0: no deadline */
    uint64_t n_killed;          /* connections closed for their deadline */
    bool     quit;
    bool     has_thread;
    pthread_t reaper;
} nx_conns;

nx_status nx_conns_init(nx_conns *c, double read_timeout_s, nx_error *err);   /* starts the reaper */
void nx_conns_destroy(nx_conns *c);   /* stops the reaper; every record must be gone */

/* The connection callbacks: a new connection (fd, peer address) -> its record (NULL: no memory). */
nx_conn *nx_conns_open(nx_conns *c, int fd, const void *sockaddr);
void nx_conns_close(nx_conns *c, nx_conn *k);
/* The request is complete (BUSY) / its response ended (IDLE, access fields cleared). */
void nx_conns_busy(nx_conns *c, nx_conn *k);
void nx_conns_idle(nx_conns *c, nx_conn *k);
/* Hold the register's mutex while touching a record's access fields. */
void nx_conns_lock(nx_conns *c);
void nx_conns_unlock(nx_conns *c);
int  nx_conns_count(nx_conns *c);

#endif
