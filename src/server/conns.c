/*
 * conns.c — the register of open connections and its deadline reaper (see conns.h).
 */
#include "server/conns.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <linux/tcp.h>
#include "core/log.h"
#include "server/backend.h"

/* Bytes the kernel has received on the socket (0 when unknown). */
static uint64_t rx_bytes(int fd) {
    struct tcp_info ti;
    socklen_t n = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &n) != 0) return 0;
    if (n < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received) return 0;
    return ti.tcpi_bytes_received;
}

static void *reaper_main(void *arg) {
    nx_conns *c = arg;
    pthread_mutex_lock(&c->mu);
    while (!c->quit) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_nsec += 100 * 1000000L;
        if (dl.tv_nsec >= 1000000000L) { dl.tv_sec++; dl.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&c->cv, &c->mu, &dl);
        if (c->quit) break;
        double now = nx_gen_now();
        for (nx_conn *k = c->head; k; k = k->next) {
            if (k->killed || k->fd < 0) continue;
            if (k->phase == NX_CONN_IDLE) {
                /* New bytes on a kept-alive connection: the next request has started. */
                if (rx_bytes(k->fd) > k->rx_idle) {
                    k->phase = NX_CONN_READING;
                    k->t_start = now;
                }
                continue;
            }
            if (k->phase != NX_CONN_READING || now - k->t_start <= c->read_timeout_s) continue;
            k->killed = true;
            c->n_killed++;
            shutdown(k->fd, SHUT_RDWR);   /* libmicrohttpd sees the end and closes it */
            NX_WARN("server: closed the connection from %s: its request was not complete after %.0f s (--read-timeout)",
                    k->addr, c->read_timeout_s);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

nx_status nx_conns_init(nx_conns *c, double read_timeout_s, nx_error *err) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->read_timeout_s = read_timeout_s;
    if (read_timeout_s > 0) {
        if (pthread_create(&c->reaper, NULL, reaper_main, c) != 0)
            return nx_fail(err, NX_ERR_INTERNAL, "cannot start the connection reaper thread");
        c->has_thread = true;
    }
    return NX_OK;
}

void nx_conns_destroy(nx_conns *c) {
    if (c->has_thread) {
        pthread_mutex_lock(&c->mu);
        c->quit = true;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->reaper, NULL);
        c->has_thread = false;
    }
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
}

nx_conn *nx_conns_open(nx_conns *c, int fd, const void *sa) {
    nx_conn *k = calloc(1, sizeof *k);
    if (!k) return NULL;
    k->fd = fd;
    k->owner = c;
    k->phase = NX_CONN_READING;
    k->t_start = nx_gen_now();
    snprintf(k->addr, sizeof k->addr, "?");
    const struct sockaddr *a = sa;
    if (a && a->sa_family == AF_INET) inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, k->addr, sizeof k->addr);
    else if (a && a->sa_family == AF_INET6) inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, k->addr, sizeof k->addr);
    pthread_mutex_lock(&c->mu);
    k->next = c->head;
    if (c->head) c->head->prev = k;
    c->head = k;
    c->n++;
    pthread_mutex_unlock(&c->mu);
    return k;
}

void nx_conns_close(nx_conns *c, nx_conn *k) {
    if (!k) return;
    pthread_mutex_lock(&c->mu);
    if (k->prev) k->prev->next = k->next;
    else c->head = k->next;
    if (k->next) k->next->prev = k->prev;
    c->n--;
    pthread_mutex_unlock(&c->mu);
    free(k);
}

void nx_conns_busy(nx_conns *c, nx_conn *k) {
    if (!k) return;
    pthread_mutex_lock(&c->mu);
    k->phase = NX_CONN_BUSY;
    pthread_mutex_unlock(&c->mu);
}

void nx_conns_idle(nx_conns *c, nx_conn *k) {
    if (!k) return;
    uint64_t rx = rx_bytes(k->fd);
    pthread_mutex_lock(&c->mu);
    k->phase = NX_CONN_IDLE;
    k->rx_idle = rx;
    memset(&k->acc, 0, sizeof k->acc);
    pthread_mutex_unlock(&c->mu);
}

void nx_conns_lock(nx_conns *c) { pthread_mutex_lock(&c->mu); }
void nx_conns_unlock(nx_conns *c) { pthread_mutex_unlock(&c->mu); }

int nx_conns_count(nx_conns *c) {
    pthread_mutex_lock(&c->mu);
    int n = c->n;
    pthread_mutex_unlock(&c->mu);
    return n;
}
