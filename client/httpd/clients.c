/* clients — libwarm connections to warmd, one per represented identity. libwarm's
 * "on behalf of" setting belongs to a connection, so two users never share one; the
 * requests of one user share theirs (libwarm clients take concurrent calls). The pool
 * keeps at most POOL_MAX connections: past that, the least recently used idle one is
 * closed, and when every one is busy a request gets a connection of its own, closed after
 * it (warmd's own caps per uid and in total still bound what all of them can hold). */
#include "httpd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POOL_MAX 64

struct client_ref {
    struct client_ref *next;
    struct identity id;
    struct warm_client *client;
    unsigned refs;
    bool pooled;
};

int clients_init(struct clients *p, const char *socket) {
    memset(p, 0, sizeof *p);
    if (strlen(socket) >= sizeof p->socket) return -ENAMETOOLONG;
    strcpy(p->socket, socket);
    return -pthread_mutex_init(&p->lock, NULL);
}

static void ref_free(struct client_ref *r) {
    if (!r) return;
    warm_disconnect(r->client);
    explicit_bzero(r->id.token, sizeof r->id.token);
    free(r);
}

void clients_done(struct clients *p) {
    for (struct client_ref *r = p->refs, *next; r; r = next) {
        next = r->next;
        ref_free(r);
    }
    p->refs = NULL;
    pthread_mutex_destroy(&p->lock);
}

static bool same(const struct identity *a, const struct identity *b) {
    if (a->by_token != b->by_token) return false;
    return a->by_token ? strcmp(a->token, b->token) == 0 : a->uid == b->uid;
}

struct warm_client *client_ref_client(struct client_ref *r) {
    return r->client;
}

/* A new connection acting for id (not yet in the pool). */
static int ref_new(const char *socket, const struct identity *id, struct client_ref **ret,
                   struct warm_error *err) {
    struct client_ref *r = calloc(1, sizeof *r);
    if (!r) {
        err->code = WARM_NO_MEMORY;
        snprintf(err->message, sizeof err->message, "out of memory");
        return -WARM_NO_MEMORY;
    }
    r->id = *id;
    int rc = warm_connect(socket, &r->client, err);
    if (rc < 0) {
        free(r);
        return rc;
    }
    if (id->by_token) rc = warm_client_act_for_token(r->client, id->token, err);
    else warm_client_act_for_uid(r->client, (int64_t)id->uid);
    if (rc < 0) {
        ref_free(r);
        return rc;
    }
    r->refs = 1;
    *ret = r;
    return 0;
}

int clients_get(struct clients *p, const struct identity *id, struct client_ref **ret,
                struct warm_error *err) {
    pthread_mutex_lock(&p->lock);
    struct client_ref **link = &p->refs;
    for (struct client_ref *r = p->refs; r; link = &r->next, r = r->next) {
        if (!same(&r->id, id)) continue;
        *link = r->next;          /* to the front: most recently used */
        r->next = p->refs;
        p->refs = r;
        r->refs++;
        pthread_mutex_unlock(&p->lock);
        *ret = r;
        return 0;
    }
    pthread_mutex_unlock(&p->lock);

    /* Connect outside the lock: warm_connect probes the socket. */
    struct client_ref *r;
    int rc = ref_new(p->socket, id, &r, err);
    if (rc < 0) return rc;

    struct client_ref *evicted = NULL;
    pthread_mutex_lock(&p->lock);
    /* Another request of the same identity may have connected meanwhile: use one. */
    for (struct client_ref *o = p->refs; o; o = o->next)
        if (same(&o->id, id)) {
            o->refs++;
            pthread_mutex_unlock(&p->lock);
            ref_free(r);
            *ret = o;
            return 0;
        }
    if (p->n >= POOL_MAX) {
        /* Drop the least recently used idle connection, if any. */
        struct client_ref **victim = NULL;
        for (struct client_ref **l = &p->refs; *l; l = &(*l)->next)
            if ((*l)->refs == 0) victim = l;
        if (victim) {
            evicted = *victim;
            *victim = evicted->next;
            p->n--;
        }
    }
    if (p->n < POOL_MAX) {
        r->pooled = true;
        r->next = p->refs;
        p->refs = r;
        p->n++;
    }
    pthread_mutex_unlock(&p->lock);
    ref_free(evicted);
    *ret = r;
    return 0;
}

void clients_put(struct clients *p, struct client_ref *r) {
    if (!r) return;
    pthread_mutex_lock(&p->lock);
    bool gone = --r->refs == 0 && !r->pooled;
    pthread_mutex_unlock(&p->lock);
    if (gone) ref_free(r);
}
