/* dlproc-agent: the board agent, a small TCP service in front of the dlproc runtime.
 *
 * It receives a compiled network and input frames, runs them through the runtime and returns the
 * outputs and the hardware profile (protocol: dlproc_proto.h, docs/firmware.md).  The same code
 * runs on the HPS (linked with hal_linux.c) and on a workstation with the simulated processor
 * (hal_sim.c, started by `dlproc agent --sim`).
 *
 * Robustness rules, because the network is not trusted:
 *   - nothing but HELLO is accepted before the token matched (constant-time comparison);
 *   - every message length is checked against a per-type limit before any payload is read;
 *   - every receive has an idle timeout and every message an overall deadline, so a stalled or
 *     vanished client costs at most that long; a client that disconnects mid-transfer just ends
 *     its session;
 *   - runtime failures (bad file, other configuration, timeout, processor error) are ERROR replies
 *     and the session goes on; protocol violations get an ERROR reply and the connection closes.
 * One client is served at a time: the processor is a single resource.
 */
#define _GNU_SOURCE
#include "dlproc_proto.h"
#include "dlproc_rt.h"
#include "dlproc_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_HAL_OPTS 32
#define AGENT_VERSION 1u

typedef struct {
    uint8_t token[DLPA_TOKEN_MAX];
    size_t token_len;
    uint64_t max_net, max_input;
    uint64_t idle_timeout_s, message_timeout_s;
    uint64_t run_timeout_ms, max_run_timeout_ms;
    dlproc_rt *rt;
    dlproc_profile *prof;
    uint8_t *out;
    size_t out_cap;
} agent;

typedef struct {
    int fd;
    uint64_t deadline_us;  /* of the message being received */
} conn;

static void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logmsg(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dlproc-agent: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

/* Compares the whole fixed-size buffers whatever the contents, so the time taken does not tell an
 * attacker how many leading bytes of a guess were right. */
static int token_equal(const agent *a, const uint8_t *guess, size_t len) {
    uint8_t g[DLPA_TOKEN_MAX] = {0};
    memcpy(g, guess, len < DLPA_TOKEN_MAX ? len : DLPA_TOKEN_MAX);
    volatile uint8_t diff = (uint8_t)((len != a->token_len) | (len > DLPA_TOKEN_MAX));
    for (size_t i = 0; i < DLPA_TOKEN_MAX; ++i) diff |= (uint8_t)(g[i] ^ a->token[i]);
    return diff == 0;
}

/* Receives exactly n bytes; 0 on success, -1 on disconnect, timeout or error. */
static int recv_all(conn *c, uint8_t *buf, size_t n, size_t *got) {
    size_t have = 0;
    while (have < n) {
        if (dlproc_now_us() > c->deadline_us) {
            errno = ETIMEDOUT;
            break;
        }
        ssize_t r = recv(c->fd, buf + have, n - have, 0);
        if (r > 0) {
            have += (size_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) errno = ECONNRESET;
        break;
    }
    if (got) *got = have;
    return have == n ? 0 : -1;
}

static int send_all(conn *c, const uint8_t *buf, size_t n) {
    while (n) {
        ssize_t w = send(c->fd, buf, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

static int send_msg(conn *c, uint16_t type, uint32_t seq, const uint8_t *a, size_t alen, const uint8_t *b,
                    size_t blen) {
    uint8_t h[DLPA_HEADER_SIZE];
    dlpa_put_header(h, type, (uint32_t)(alen + blen), seq);
    return send_all(c, h, sizeof h) || send_all(c, a, alen) || send_all(c, b, blen) ? -1 : 0;
}

static int send_error(conn *c, uint32_t seq, int code, uint32_t hw_error, const char *msg) {
    size_t n = strlen(msg);
    if (n > DLPA_ERROR_MSG_MAX) n = DLPA_ERROR_MSG_MAX;
    uint8_t head[12];
    dlproc_st32(head, (uint32_t)code);
    dlproc_st32(head + 4, hw_error);
    dlproc_st32(head + 8, (uint32_t)n);
    return send_msg(c, DLPA_ERROR, seq, head, sizeof head, (const uint8_t *)msg, n);
}

static int send_info(agent *a, conn *c, uint32_t seq) {
    const dlproc_hw_info *hw = dlproc_rt_hw(a->rt);
    uint8_t p[DLPA_INFO_SIZE] = {0};
    dlproc_st32(p + 0, DLPA_VERSION);
    dlproc_st32(p + 4, DLPROC_RT_VERSION);
    dlproc_st32(p + 8, hw->id);
    dlproc_st32(p + 12, hw->version);
    dlproc_st64(p + 16, hw->config_hash);
    const uint32_t v[] = {hw->c, hw->mem_bytes, hw->max_burst, hw->queue_depth, hw->inp_depth,
                          hw->wgt_depth, hw->prm_depth, hw->out_depth, hw->profile_depth};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; ++i) dlproc_st32(p + 24 + 4 * i, v[i]);
    dlproc_st64(p + 64, hw->dma_phys);
    dlproc_st64(p + 72, hw->dma_size);
    dlproc_st64(p + 80, a->max_net);
    dlproc_st64(p + 88, a->max_input);
    strncpy((char *)p + 96, dlproc_hal_name(), 15);
    return send_msg(c, DLPA_OK, seq, p, sizeof p, NULL, 0);
}

static int do_deploy(agent *a, conn *c, uint32_t seq, const uint8_t *payload, size_t len) {
    dlproc_error e;
    if (dlproc_rt_deploy(a->rt, payload, len, &e)) {
        logmsg("deploy rejected: %s: %s", dlproc_status_name(e.code), e.msg);
        return send_error(c, seq, e.code, 0, e.msg);
    }
    const dlproc_net *net = dlproc_rt_net(a->rt);
    if (net->output_size > a->out_cap) {
        uint8_t *nb = realloc(a->out, (size_t)net->output_size);
        if (!nb) return send_error(c, seq, DLPROC_E_NOMEM, 0, "out of memory for the output region");
        a->out = nb;
        a->out_cap = (size_t)net->output_size;
    }
    uint8_t p[DLPA_DEPLOY_SIZE] = {0};
    const uint64_t v[6] = {net->base, net->end, net->input_off, net->input_size, net->output_off, net->output_size};
    for (int i = 0; i < 6; ++i) dlproc_st64(p + 8 * i, v[i]);
    dlproc_st32(p + 48, net->insn_count);
    dlproc_st32(p + 52, net->n_layers);
    dlproc_st32(p + 56, net->n_profile);
    dlproc_st64(p + 64, net->compiled_base);
    logmsg("deployed a network of %u layers, %u instructions at 0x%llx%s", net->n_layers, net->insn_count,
           (unsigned long long)net->base, net->base != net->compiled_base ? " (relocated)" : "");
    return send_msg(c, DLPA_OK, seq, p, sizeof p, NULL, 0);
}

static int do_run(agent *a, conn *c, uint32_t seq, const uint8_t *payload, size_t len) {
    uint64_t timeout_us = dlproc_ld32(payload);
    if (timeout_us == 0) timeout_us = a->run_timeout_ms * 1000u;
    if (timeout_us > a->max_run_timeout_ms * 1000u) {
        char msg[160];
        snprintf(msg, sizeof msg, "run timeout %llu us exceeds this agent's maximum of %llu ms",
                 (unsigned long long)timeout_us, (unsigned long long)a->max_run_timeout_ms);
        return send_error(c, seq, DLPROC_E_ARG, 0, msg);
    }
    dlproc_error e;
    size_t out_len = 0;
    if (dlproc_rt_run(a->rt, payload + 4, len - 4, a->out, a->out_cap, &out_len, timeout_us, a->prof, &e)) {
        logmsg("run failed: %s: %s", dlproc_status_name(e.code), e.msg);
        return send_error(c, seq, e.code, e.hw_error, e.msg);
    }
    const dlproc_profile *p = a->prof;
    size_t n = DLPA_RESULT_HEAD + 8u * p->prof_count + 4u * DLPROC_N_PERF + 8u;
    uint8_t *head = malloc(n);
    if (!head) return send_error(c, seq, DLPROC_E_NOMEM, 0, "out of memory for the result");
    dlproc_st64(head, p->cycles);
    dlproc_st64(head + 8, p->wall_us);
    dlproc_st32(head + 16, p->fetched);
    dlproc_st32(head + 20, p->prof_count);
    dlproc_st32(head + 24, DLPROC_N_PERF);
    dlproc_st32(head + 28, 0);
    uint8_t *q = head + DLPA_RESULT_HEAD;
    for (uint32_t i = 0; i < p->prof_count; ++i, q += 8) dlproc_st64(q, p->prof[i]);
    for (unsigned i = 0; i < DLPROC_N_PERF; ++i, q += 4) dlproc_st32(q, p->perf[i]);
    dlproc_st64(q, out_len);
    int rc = send_msg(c, DLPA_RESULT, seq, head, n, a->out, out_len);
    free(head);
    return rc;
}

/* The most payload bytes a message of this type may carry, or -1 for an unknown type. */
static int64_t limit_of(const agent *a, uint16_t type, uint64_t *min) {
    *min = 0;
    switch (type) {
    case DLPA_HELLO: *min = 1; return DLPA_TOKEN_MAX;
    case DLPA_INFO:
    case DLPA_BYE: return 0;
    case DLPA_DEPLOY: *min = 1; return (int64_t)a->max_net;
    case DLPA_RUN: *min = 4; return (int64_t)(a->max_input + 4);
    default: return -1;
    }
}

/* Serves one connection until it ends; returns nothing because every failure only ends it. */
static void serve(agent *a, int fd, const char *peer) {
    conn c = {.fd = fd};
    int authed = 0;
    uint8_t *payload = NULL;
    for (;;) {
        uint8_t hb[DLPA_HEADER_SIZE];
        size_t got = 0;
        c.deadline_us = dlproc_now_us() + a->message_timeout_s * 1000000u;
        if (recv_all(&c, hb, sizeof hb, &got)) {
            if (got) logmsg("%s: connection ended inside a message header (%zu of 16 bytes)", peer, got);
            break;
        }
        dlpa_header h;
        dlpa_get_header(hb, &h);
        char msg[256];
        if (h.magic != DLPA_MAGIC || h.version != DLPA_VERSION) {
            snprintf(msg, sizeof msg, "not a dlproc agent message (magic 0x%08x, version %u); expected magic 0x%08x "
                     "version %u", h.magic, h.version, DLPA_MAGIC, DLPA_VERSION);
            send_error(&c, h.seq, DLPROC_E_PROTO, 0, msg);
            break;
        }
        uint64_t min = 0;
        int64_t max = limit_of(a, h.type, &min);
        if (max < 0) {
            snprintf(msg, sizeof msg, "unknown message type %u (HELLO=1, INFO=2, DEPLOY=3, RUN=4, BYE=5)", h.type);
            send_error(&c, h.seq, DLPROC_E_PROTO, 0, msg);
            break;
        }
        if (h.length > (uint64_t)max || h.length < min) {
            snprintf(msg, sizeof msg, "message type %u with %u payload bytes; this agent accepts %llu..%lld bytes for it",
                     h.type, h.length, (unsigned long long)min, (long long)max);
            send_error(&c, h.seq, h.length > (uint64_t)max ? DLPROC_E_TOO_BIG : DLPROC_E_PROTO, 0, msg);
            break;
        }
        if (!authed && h.type != DLPA_HELLO) {
            send_error(&c, h.seq, DLPROC_E_AUTH, 0, "authenticate first: the first message must be HELLO with the token");
            break;
        }
        free(payload);
        payload = malloc(h.length ? h.length : 1);
        if (!payload) {
            send_error(&c, h.seq, DLPROC_E_NOMEM, 0, "out of memory for the message");
            break;
        }
        c.deadline_us = dlproc_now_us() + a->message_timeout_s * 1000000u;
        if (recv_all(&c, payload, h.length, &got)) {
            logmsg("%s: client went away during a %u-byte message after %zu bytes (%s)", peer, h.length, got,
                   strerror(errno));
            break;
        }
        int rc = 0;
        if (h.type == DLPA_HELLO) {
            if (!token_equal(a, payload, h.length)) {
                logmsg("%s: wrong token", peer);
                /* A pause makes guessing tokens over the network slow. */
                struct timespec ts = {0, 200 * 1000 * 1000};
                nanosleep(&ts, NULL);
                send_error(&c, h.seq, DLPROC_E_AUTH, 0, "wrong token");
                break;
            }
            authed = 1;
            rc = send_info(a, &c, h.seq);
        } else if (h.type == DLPA_INFO) {
            rc = send_info(a, &c, h.seq);
        } else if (h.type == DLPA_DEPLOY) {
            rc = do_deploy(a, &c, h.seq, payload, h.length);
        } else if (h.type == DLPA_RUN) {
            rc = do_run(a, &c, h.seq, payload, h.length);
        } else {  /* BYE */
            send_msg(&c, DLPA_OK, h.seq, NULL, 0, NULL, 0);
            break;
        }
        if (rc) {
            logmsg("%s: could not send the reply (%s)", peer, strerror(errno));
            break;
        }
    }
    free(payload);
}

static int read_token(agent *a, const char *file) {
    const char *env = getenv("DLPROC_AGENT_TOKEN");
    char buf[DLPA_TOKEN_MAX + 2];
    size_t n = 0;
    if (file) {
        FILE *f = fopen(file, "rb");
        if (!f) {
            logmsg("cannot open the token file %s", file);
            return -1;
        }
        n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) --n;
    } else if (env) {
        n = strlen(env);
        if (n <= DLPA_TOKEN_MAX) memcpy(buf, env, n);
    }
    if (n == 0 || n > DLPA_TOKEN_MAX) {
        logmsg("a token of 1..%u bytes is required: --token-file FILE or the environment variable "
               "DLPROC_AGENT_TOKEN", DLPA_TOKEN_MAX);
        return -1;
    }
    memcpy(a->token, buf, n);
    a->token_len = n;
    return 0;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: dlproc-agent [--hal KEY=VALUE]... [--bind ADDR] [--port P] [--token-file F]\n"
            "                    [--max-net-bytes N] [--max-input-bytes N] [--idle-timeout-s S]\n"
            "                    [--message-timeout-s S] [--run-timeout-ms MS] [--max-run-timeout-ms MS]\n"
            "The token comes from --token-file or the environment variable DLPROC_AGENT_TOKEN.\n"
            "--port 0 picks a free port; the agent prints 'listening on ADDR:PORT' when ready.\n"
            "HAL '%s' options:\n%s", dlproc_hal_name(), dlproc_hal_usage());
}

static int parse_num(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    if (dlproc_parse_u64(s, out) || *out < lo || *out > hi) {
        logmsg("%s must be %llu..%llu, not '%s'", opt, (unsigned long long)lo, (unsigned long long)hi, s);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    agent a = {.max_net = 64u << 20, .max_input = 16u << 20, .idle_timeout_s = 30, .message_timeout_s = 120,
               .run_timeout_ms = 10000, .max_run_timeout_ms = 600000};
    char *hal_opts[MAX_HAL_OPTS];
    int nopts = 0;
    const char *bind_addr = "127.0.0.1", *token_file = NULL;
    uint64_t port = 7474;
    static const struct option longopts[] = {
        {"hal", required_argument, NULL, 'H'},
        {"bind", required_argument, NULL, 'b'},
        {"port", required_argument, NULL, 'p'},
        {"token-file", required_argument, NULL, 'T'},
        {"max-net-bytes", required_argument, NULL, 'n'},
        {"max-input-bytes", required_argument, NULL, 'i'},
        {"idle-timeout-s", required_argument, NULL, 'I'},
        {"message-timeout-s", required_argument, NULL, 'M'},
        {"run-timeout-ms", required_argument, NULL, 'r'},
        {"max-run-timeout-ms", required_argument, NULL, 'R'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int ch, bad = 0;
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'H':
            if (nopts == MAX_HAL_OPTS) return logmsg("at most %d --hal options", MAX_HAL_OPTS), 2;
            hal_opts[nopts++] = optarg;
            break;
        case 'b': bind_addr = optarg; break;
        case 'p': bad |= parse_num("--port", optarg, 0, 65535, &port); break;
        case 'T': token_file = optarg; break;
        case 'n': bad |= parse_num("--max-net-bytes", optarg, 64, 0xFFFFFFFFu, &a.max_net); break;
        case 'i': bad |= parse_num("--max-input-bytes", optarg, 1, 0xFFFFFFFBu, &a.max_input); break;
        case 'I': bad |= parse_num("--idle-timeout-s", optarg, 1, 3600, &a.idle_timeout_s); break;
        case 'M': bad |= parse_num("--message-timeout-s", optarg, 1, 3600, &a.message_timeout_s); break;
        case 'r': bad |= parse_num("--run-timeout-ms", optarg, 1, 86400000u, &a.run_timeout_ms); break;
        case 'R': bad |= parse_num("--max-run-timeout-ms", optarg, 1, 86400000u, &a.max_run_timeout_ms); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (bad || optind != argc) {
        if (optind != argc) usage(stderr);
        return 2;
    }
    if (read_token(&a, token_file)) return 2;
    if (a.run_timeout_ms > a.max_run_timeout_ms) a.run_timeout_ms = a.max_run_timeout_ms;
    signal(SIGPIPE, SIG_IGN);

    char err[512];
    dlproc_hal *hal = NULL;
    dlproc_error e;
    if (dlproc_hal_open(nopts, hal_opts, &hal, err, sizeof err)) return logmsg("HAL: %s", err), 1;
    if (dlproc_rt_open(&a.rt, hal, &e)) {
        logmsg("%s: %s", dlproc_status_name(e.code), e.msg);
        dlproc_hal_close(hal);
        return 1;
    }
    a.prof = calloc(1, sizeof *a.prof);
    if (!a.prof) return logmsg("out of memory"), 1;

    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (ls < 0 || inet_pton(AF_INET, bind_addr, &sa.sin_addr) != 1) {
        logmsg("cannot listen on '%s' (an IPv4 address is expected)", bind_addr);
        return 1;
    }
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    socklen_t slen = sizeof sa;
    if (bind(ls, (struct sockaddr *)&sa, sizeof sa) || listen(ls, 8) || getsockname(ls, (struct sockaddr *)&sa, &slen)) {
        logmsg("cannot listen on %s:%llu: %s", bind_addr, (unsigned long long)port, strerror(errno));
        return 1;
    }
    const dlproc_hw_info *hw = dlproc_rt_hw(a.rt);
    printf("dlproc-agent: listening on %s:%u (HAL %s, processor config %016llx, C=%u)\n", bind_addr,
           ntohs(sa.sin_port), dlproc_hal_name(), (unsigned long long)hw->config_hash, hw->c);
    fflush(stdout);
    for (;;) {
        struct sockaddr_in peer;
        socklen_t plen = sizeof peer;
        int fd = accept4(ls, (struct sockaddr *)&peer, &plen, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EINTR && errno != ECONNABORTED) logmsg("accept failed: %s", strerror(errno));
            continue;
        }
        struct timeval tv = {.tv_sec = (time_t)a.idle_timeout_s};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        char name[64];
        char ip[INET_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof ip);
        snprintf(name, sizeof name, "%s:%u", ip, ntohs(peer.sin_port));
        serve(&a, fd, name);
        close(fd);
    }
}
