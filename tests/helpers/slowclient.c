/* Hostile and timing clients for tests/cli_serve_hostile.sh (kace serve on
 * loopback):
 *
 *   kace-test-slowclient hold PORT N SOURCES headers INTERVAL_MS
 *       N connections, spread over the source addresses 127.0.0.2 ..
 *       127.0.0.(1+SOURCES), each sending a request's headers one byte every
 *       INTERVAL_MS and never finishing them (a "slowloris").
 *   kace-test-slowclient hold PORT N SOURCES body INTERVAL_MS LENGTH SENT [PATH]
 *       N connections each declaring a body of LENGTH bytes (POST PATH,
 *       default /v1/predict), sending SENT of them at once, then one byte
 *       every INTERVAL_MS.
 *   Both print "ready open=O closed=C" (flushed) once every connection has
 *   sent its first part or was closed, keep trickling until SIGTERM, and
 *   print "final open=O closed=C status_NNN=K..." (statuses of the replies
 *   seen). Connections the server closes without a reply count as closed.
 *   While trickling, "now open=O closed=C ..." each time a connection
 *   closes, so that a test can wait for the closes instead of sleeping.
 *
 *   kace-test-slowclient probe PORT N [PATH]
 *       N requests GET PATH (default /healthz) in turn, each on a new
 *       connection from 127.0.0.1; prints "median_us=M max_us=X failed=F"
 *       (a request without a 200 within 5 s fails).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct conn {
    int fd;
    size_t sent;     /* bytes of the first part sent */
    size_t trickled; /* bytes sent one at a time afterwards */
    int status;      /* status of the reply seen, 0 when none */
    char head[16];   /* first bytes of the reply */
    size_t head_len;
    int closed;
} conn;

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
    (void)sig;
    stop = 1;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int open_conn(int port, const char *source, int nonblock)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET};
    if (source) {
        inet_pton(AF_INET, source, &a.sin_addr);
        if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0) {
            close(fd);
            return -1;
        }
    }
    a.sin_port = htons((unsigned short)port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    if (nonblock)
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

/* Reads what arrived: a reply's status, or the end of the connection. */
static void drain(conn *c)
{
    char buf[4096];
    for (;;) {
        ssize_t n = recv(c->fd, buf, sizeof buf, 0);
        if (n > 0) {
            for (ssize_t i = 0; i < n && c->head_len < sizeof c->head - 1; i++)
                c->head[c->head_len++] = buf[i];
            c->head[c->head_len] = '\0';
            if (!c->status && c->head_len >= 12 && strncmp(c->head, "HTTP/1.", 7) == 0)
                c->status = atoi(c->head + 9);
            continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            c->closed = 1;
            close(c->fd);
            c->fd = -1;
        }
        return;
    }
}

static void report(const char *what, const conn *cs, int n)
{
    int open = 0, closed = 0, count[600] = {0};
    for (int i = 0; i < n; i++) {
        if (cs[i].closed)
            closed++;
        else
            open++;
        if (cs[i].status > 0 && cs[i].status < 600)
            count[cs[i].status]++;
    }
    printf("%s open=%d closed=%d", what, open, closed);
    for (int s = 0; s < 600; s++)
        if (count[s])
            printf(" status_%d=%d", s, count[s]);
    printf("\n");
    fflush(stdout);
}

static int hold(int argc, char **argv)
{
    if (argc < 7)
        return 2;
    int port = atoi(argv[2]), n = atoi(argv[3]), sources = atoi(argv[4]);
    int body_mode = strcmp(argv[5], "body") == 0;
    int interval_ms = atoi(argv[6]);
    size_t length = 0, sent = 0;
    const char *path = "/v1/predict";
    if (body_mode) {
        if (argc < 9)
            return 2;
        length = strtoul(argv[7], NULL, 10);
        sent = strtoul(argv[8], NULL, 10);
        if (argc > 9)
            path = argv[9];
    }
    if (n <= 0 || sources <= 0 || sources > 250 || interval_ms <= 0 || sent > length)
        return 2;
    /* the first part: headers (all of them, then SENT bytes of body; or a
     * request line and one header, never ended) */
    char head[512];
    if (body_mode)
        snprintf(head, sizeof head,
                 "POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                 "Content-Length: %zu\r\n\r\n",
                 path, port, length);
    else
        snprintf(head, sizeof head, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n", port);
    size_t head_len = strlen(head), first = head_len + sent;
    char *part = malloc(first);
    conn *cs = calloc((size_t)n, sizeof *cs);
    struct pollfd *pfd = calloc((size_t)n, sizeof *pfd);
    if (!part || !cs || !pfd)
        return 1;
    memcpy(part, head, head_len);
    memset(part + head_len, ' ', sent); /* white space: valid JSON padding */
    signal(SIGTERM, on_term);
    signal(SIGPIPE, SIG_IGN);

    for (int i = 0; i < n; i++) {
        char source[32];
        snprintf(source, sizeof source, "127.0.0.%d", 2 + i % sources);
        cs[i].fd = open_conn(port, source, 1);
        if (cs[i].fd < 0)
            cs[i].closed = 1;
    }
    /* send the first parts, reading whatever comes back, for at most 30 s */
    double t_end = now_s() + 30;
    for (;;) {
        int waiting = 0;
        for (int i = 0; i < n; i++) {
            conn *c = &cs[i];
            pfd[i].fd = c->fd;
            pfd[i].events = POLLIN | (c->fd >= 0 && c->sent < first ? POLLOUT : 0);
            pfd[i].revents = 0;
            if (c->fd >= 0 && c->sent < first && !c->status)
                waiting++;
        }
        if (!waiting || now_s() > t_end || stop)
            break;
        poll(pfd, (nfds_t)n, 100);
        for (int i = 0; i < n; i++) {
            conn *c = &cs[i];
            if (c->fd < 0)
                continue;
            if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR))
                drain(c);
            if (c->fd >= 0 && (pfd[i].revents & POLLOUT) && c->sent < first) {
                ssize_t k = send(c->fd, part + c->sent, first - c->sent, MSG_NOSIGNAL);
                if (k > 0)
                    c->sent += (size_t)k;
                else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                    drain(c);
                    if (c->fd >= 0) {
                        close(c->fd);
                        c->fd = -1;
                        c->closed = 1;
                    }
                }
            }
        }
    }
    report("ready", cs, n);
    /* trickle: one more byte per connection every interval */
    static const char header_bytes[] = "X-Slow: 1\r\n";
    double next = now_s();
    while (!stop) {
        if (now_s() >= next) {
            next += interval_ms / 1000.0;
            for (int i = 0; i < n; i++) {
                conn *c = &cs[i];
                if (c->fd < 0 || c->status)
                    continue;
                char b = body_mode ? ' ' : header_bytes[c->trickled % (sizeof header_bytes - 1)];
                if (body_mode && sent + c->trickled + 1 >= length)
                    continue; /* never complete the body */
                if (send(c->fd, &b, 1, MSG_NOSIGNAL) == 1)
                    c->trickled++;
            }
        }
        for (int i = 0; i < n; i++) {
            pfd[i].fd = cs[i].fd;
            pfd[i].events = POLLIN;
            pfd[i].revents = 0;
        }
        poll(pfd, (nfds_t)n, 50);
        bool closes = false;
        for (int i = 0; i < n; i++)
            if (cs[i].fd >= 0 && (pfd[i].revents & (POLLIN | POLLHUP | POLLERR))) {
                drain(&cs[i]);
                closes |= cs[i].fd < 0;
            }
        if (closes)
            report("now", cs, n);
    }
    report("final", cs, n);
    for (int i = 0; i < n; i++)
        if (cs[i].fd >= 0)
            close(cs[i].fd);
    free(part);
    free(cs);
    free(pfd);
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int probe(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    int port = atoi(argv[2]), n = atoi(argv[3]);
    const char *path = argc > 4 ? argv[4] : "/healthz";
    if (n <= 0)
        return 2;
    double *t = calloc((size_t)n, sizeof *t);
    if (!t)
        return 1;
    signal(SIGPIPE, SIG_IGN);
    int failed = 0;
    char req[256];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n", path, port);
    for (int i = 0; i < n; i++) {
        double t0 = now_s();
        int ok = 0;
        int fd = open_conn(port, NULL, 0);
        if (fd >= 0 && send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t)strlen(req)) {
            char buf[4096], first[16] = "";
            size_t got = 0;
            struct pollfd p = {.fd = fd, .events = POLLIN};
            for (;;) {
                int left_ms = (int)((t0 + 5 - now_s()) * 1000);
                if (left_ms <= 0 || poll(&p, 1, left_ms) <= 0)
                    break;
                ssize_t k = recv(fd, buf, sizeof buf, 0);
                if (k <= 0) {
                    ok = strncmp(first, "HTTP/1.1 200", 12) == 0;
                    break;
                }
                for (ssize_t j = 0; j < k && got < sizeof first - 1; j++)
                    first[got++] = buf[j];
            }
        }
        if (fd >= 0)
            close(fd);
        t[i] = (now_s() - t0) * 1e6;
        if (!ok) {
            failed++;
            t[i] = 5e6;
        }
    }
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    printf("median_us=%.0f max_us=%.0f failed=%d\n", n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2, t[n - 1],
           failed);
    free(t);
    return 0;
}

int main(int argc, char **argv)
{
    int rc = 2;
    if (argc > 1 && strcmp(argv[1], "hold") == 0)
        rc = hold(argc, argv);
    else if (argc > 1 && strcmp(argv[1], "probe") == 0)
        rc = probe(argc, argv);
    if (rc == 2)
        fprintf(stderr, "usage: kace-test-slowclient hold PORT N SOURCES headers|body INTERVAL_MS [LENGTH SENT [PATH]]\n"
                        "       kace-test-slowclient probe PORT N [PATH]\n");
    return rc;
}
