/* The colocation advisor: the JSON endpoints of `kace serve` as pure
 * functions (request text in, reply text out). Shapes: docs/openapi.yaml. */
#include <ctype.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "advisor.h"
#include "kace/place.h"
#include "kace/policy.h"
#include "serve_k8s.h"

#define MAX_LIST 1024 /* most names in one list ("among", "gpus") */

static const struct {
    const char *method, *path, *name;
} routes[KACE_N_ROUTES] = {
    [KACE_ROUTE_PREDICT] = {"POST", "/v1/predict", "predict"},
    [KACE_ROUTE_PARTNERS] = {"POST", "/v1/partners", "partners"},
    [KACE_ROUTE_PLACE] = {"POST", "/v1/place", "place"},
    [KACE_ROUTE_MPS_SPLIT] = {"POST", "/v1/mps-split", "mps_split"},
    [KACE_ROUTE_OBSERVE] = {"POST", "/v1/observations", "observations"},
    [KACE_ROUTE_WORKLOADS] = {"GET", "/v1/workloads", "workloads"},
    [KACE_ROUTE_K8S_FILTER] = {"POST", "/k8s/filter", "k8s_filter"},
    [KACE_ROUTE_K8S_PRIORITIZE] = {"POST", "/k8s/prioritize", "k8s_prioritize"},
    [KACE_ROUTE_K8S_BIND] = {"POST", "/k8s/bind", "k8s_bind"},
    [KACE_ROUTE_K8S_NODES] = {"POST", "/k8s/nodes", "k8s_nodes"},
    [KACE_ROUTE_K8S_STATE] = {"GET", "/k8s/state", "k8s_state"},
    [KACE_ROUTE_HEALTH] = {"GET", "/healthz", "healthz"},
    [KACE_ROUTE_METRICS] = {"GET", "/metrics", "metrics"},
    [KACE_ROUTE_OTHER] = {"", "", "other"},
};

const char *kace_route_name(kace_route route)
{
    return route >= 0 && route < KACE_N_ROUTES ? routes[route].name : "other";
}

kace_route kace_route_find(const char *method, const char *path, bool *method_ok)
{
    *method_ok = true;
    for (int r = 0; r < KACE_ROUTE_OTHER; r++)
        if (strcmp(path, routes[r].path) == 0) {
            *method_ok = strcmp(method, routes[r].method) == 0 ||
                         (strcmp(method, "HEAD") == 0 && strcmp(routes[r].method, "GET") == 0);
            return (kace_route)r;
        }
    return KACE_ROUTE_OTHER;
}

static const char *model_kind_name(const kace_advisor *a)
{
    return kace_predictor_name(kace_advisor_predictor(a));
}

bool kace_route_is_extender(kace_route route)
{
    /* what kube-scheduler calls: it sends no bearer token, so these come
     * through a listener only it reaches (kace serve --extender-listen) */
    return route == KACE_ROUTE_K8S_FILTER || route == KACE_ROUTE_K8S_PRIORITIZE || route == KACE_ROUTE_K8S_BIND;
}

size_t kace_serve_body_limit(kace_route route)
{
    return kace_route_is_extender(route) ? KACE_SERVE_MAX_EXTENDER_BODY_LIMIT : KACE_SERVE_MAX_BODY_DEFAULT;
}

kace_status kace_advisor_check_endpoints(kace_ctx *ctx, const kace_advisor *a)
{
    if (!kace_predictor_can(kace_advisor_predictor(a), KACE_PRED_MEMBERS))
        return kace_fail(ctx, KACE_ERR_UNSUPPORTED,
                         "the %s model cannot answer /v1/place, /k8s/filter and /k8s/prioritize: they need each "
                         "workload's predicted throughput, which only the slowdown model gives (kace train --kind "
                         "slowdown, or kace serve --allow-partial-model to serve it anyway)",
                         model_kind_name(a));
    return KACE_OK;
}

/* ---- admission: Origin, Content-Type, bearer token ---------------------- */

bool kace_serve_token_equal(const char *given, const char *expected)
{
    size_t n = strlen(expected), m = strlen(given);
    unsigned char diff = (unsigned char)(n != m);
    /* every byte of expected is compared, whatever the given length */
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(expected[i] ^ (i < m ? given[i] : 0));
    return diff == 0;
}

/* "host[:port]" of an authority (the Host header, or an origin after
 * "scheme://"): host lower-cased into host (brackets kept for IPv6), the
 * port's digits into port ("" when none). False when malformed. */
static bool split_authority(const char *a, size_t len, char *host, size_t host_size, char *port, size_t port_size)
{
    size_t h = 0;
    if (len > 0 && a[0] == '[') { /* [v6]:port */
        const char *close = memchr(a, ']', len);
        if (!close)
            return false;
        h = (size_t)(close - a) + 1;
    } else {
        while (h < len && a[h] != ':')
            h++;
    }
    if (h == 0 || h >= host_size)
        return false;
    for (size_t i = 0; i < h; i++)
        host[i] = (char)tolower((unsigned char)a[i]);
    host[h] = '\0';
    port[0] = '\0';
    if (h < len) {
        if (a[h] != ':' || len - h - 1 == 0 || len - h - 1 >= port_size)
            return false;
        for (size_t i = h + 1; i < len; i++)
            if (!isdigit((unsigned char)a[i]))
                return false;
        memcpy(port, a + h + 1, len - h - 1);
        port[len - h - 1] = '\0';
    }
    return true;
}

/* Whether an Origin ("scheme://host[:port]") names the same server as the
 * Host header: same host, and the same port (an absent one being the
 * scheme's default on the origin's side; a Host without port matches an
 * origin on its scheme's default port, as a proxy may drop it). */
static bool same_origin(const char *origin, const char *host_header)
{
    const char *sep = strstr(origin, "://");
    if (!sep || !host_header)
        return false;
    size_t scheme_len = (size_t)(sep - origin);
    const char *default_port = scheme_len == 4 && strncasecmp(origin, "http", 4) == 0    ? "80"
                               : scheme_len == 5 && strncasecmp(origin, "https", 5) == 0 ? "443"
                                                                                         : NULL;
    if (!default_port)
        return false;
    char oh[256], op[8], hh[256], hp[8];
    const char *auth = sep + 3;
    if (!split_authority(auth, strlen(auth), oh, sizeof oh, op, sizeof op) ||
        !split_authority(host_header, strlen(host_header), hh, sizeof hh, hp, sizeof hp))
        return false;
    if (strcmp(oh, hh) != 0)
        return false;
    const char *o_port = op[0] ? op : default_port;
    return strcmp(o_port, hp[0] ? hp : default_port) == 0;
}

static bool allowed_origin(const kace_serve_guard *g, const char *origin, const char *host)
{
    if (same_origin(origin, host))
        return true;
    for (size_t i = 0; i < g->n_origins; i++)
        if (strcasecmp(origin, g->origins[i]) == 0)
            return true;
    return false;
}

/* The media type of a Content-Type value is application/json (parameters
 * such as "; charset=utf-8" allowed). */
static bool is_json_type(const char *ct)
{
    static const char want[] = "application/json";
    if (!ct)
        return false;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    if (strncasecmp(ct, want, sizeof want - 1) != 0)
        return false;
    ct += sizeof want - 1;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    return *ct == '\0' || *ct == ';';
}

/* ---- agents' tokens --------------------------------------------------------- */

#define AGENT_NAME_MAX 32
#define AGENT_TOKEN_MAX 4096

typedef struct agent_token {
    char name[AGENT_NAME_MAX + 1];
    char *token;
    size_t line;
} agent_token;

struct kace_agent_tokens {
    agent_token *items;
    size_t n;
};

void kace_agent_tokens_free(kace_agent_tokens **t)
{
    if (!t || !*t)
        return;
    for (size_t i = 0; i < (*t)->n; i++)
        free((*t)->items[i].token);
    free((*t)->items);
    free(*t);
    *t = NULL;
}

size_t kace_agent_tokens_count(const kace_agent_tokens *t)
{
    return t ? t->n : 0;
}

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static bool is_token_char(char c)
{
    return c > ' ' && c != 127;
}

/* One line (without its newline) into t; line/col for errors. */
static kace_status parse_agent_line(kace_ctx *ctx, const char *origin, size_t line, const char *p, size_t n,
                                    kace_agent_tokens *t, size_t *cap)
{
    size_t i = 0;
    while (i < n && (p[i] == ' ' || p[i] == '\t'))
        i++;
    if (i == n || p[i] == '#' || (p[i] == '\r' && i + 1 == n))
        return KACE_OK;
    size_t name_at = i;
    while (i < n && is_name_char(p[i]))
        i++;
    if (i == name_at || i - name_at > AGENT_NAME_MAX || (i < n && p[i] != ' ' && p[i] != '\t')) {
        size_t bad = i - name_at > AGENT_NAME_MAX ? name_at + AGENT_NAME_MAX : i; /* the first character too many */
        return kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: expected an agent name of 1..%d characters [a-z0-9_-] "
                         "then a space and its token", origin, line, bad + 1, AGENT_NAME_MAX);
    }
    size_t name_len = i - name_at;
    while (i < n && (p[i] == ' ' || p[i] == '\t'))
        i++;
    size_t token_at = i;
    while (i < n && is_token_char(p[i]))
        i++;
    size_t token_len = i - token_at;
    if (token_len == 0 || token_len > AGENT_TOKEN_MAX)
        return kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: expected the agent's token: 1..%d printable characters "
                         "without spaces", origin, line, token_at + 1, AGENT_TOKEN_MAX);
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r'))
        i++;
    if (i < n)
        return kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: expected the end of the line after the token (NAME TOKEN)",
                         origin, line, i + 1);
    for (size_t k = 0; k < t->n; k++) {
        if (strlen(t->items[k].name) == name_len && memcmp(t->items[k].name, p + name_at, name_len) == 0)
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: agent '%.*s' already has a token (line %zu)", origin,
                             line, name_at + 1, (int)name_len, p + name_at, t->items[k].line);
        if (strlen(t->items[k].token) == token_len && memcmp(t->items[k].token, p + token_at, token_len) == 0)
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: this token is also agent '%s''s (line %zu): each agent "
                             "needs a token of its own", origin, line, token_at + 1, t->items[k].name, t->items[k].line);
    }
    if (t->n == *cap) {
        size_t c = *cap ? 2 * *cap : 8;
        agent_token *items = realloc(t->items, c * sizeof *items);
        if (!items)
            return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        t->items = items;
        *cap = c;
    }
    agent_token *a = &t->items[t->n];
    memcpy(a->name, p + name_at, name_len);
    a->name[name_len] = '\0';
    a->line = line;
    if (!(a->token = malloc(token_len + 1)))
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    memcpy(a->token, p + token_at, token_len);
    a->token[token_len] = '\0';
    t->n++;
    return KACE_OK;
}

kace_status kace_agent_tokens_parse(kace_ctx *ctx, const char *origin, const char *text, size_t len,
                                    kace_agent_tokens **out)
{
    *out = NULL;
    if (!origin)
        origin = "agent tokens";
    kace_agent_tokens *t = calloc(1, sizeof *t);
    if (!t)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    size_t cap = 0, line = 1;
    kace_status st = KACE_OK;
    for (size_t at = 0; at < len && !st; line++) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
        if (memchr(text + at, '\0', n))
            st = kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: a NUL byte (expected text)", origin, line,
                           (size_t)((const char *)memchr(text + at, '\0', n) - (text + at)) + 1);
        else
            st = parse_agent_line(ctx, origin, line, text + at, n, t, &cap);
        at += n + 1;
    }
    if (!st && t->n == 0)
        st = kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:1: expected at least one line 'NAME TOKEN' (no agent named)",
                       origin, line);
    if (st) {
        kace_agent_tokens_free(&t);
        return st;
    }
    *out = t;
    return KACE_OK;
}

bool kace_agent_tokens_has(const kace_agent_tokens *t, const char *token)
{
    bool found = false;
    for (size_t i = 0; t && token && i < t->n; i++)
        found |= kace_serve_token_equal(token, t->items[i].token);
    return found;
}

const char *kace_agent_of(const kace_agent_tokens *t, const char *authorization)
{
    static const char bearer[] = "Bearer ";
    if (!t || !authorization || strncasecmp(authorization, bearer, sizeof bearer - 1) != 0)
        return NULL;
    const char *given = authorization + sizeof bearer - 1, *name = NULL;
    for (size_t i = 0; i < t->n; i++) /* no early exit: the time does not tell which agent matched */
        if (kace_serve_token_equal(given, t->items[i].token))
            name = t->items[i].name;
    return name;
}

static bool bearer_is(const char *authorization, const char *token)
{
    static const char bearer[] = "Bearer ";
    return authorization && strncasecmp(authorization, bearer, sizeof bearer - 1) == 0 &&
           kace_serve_token_equal(authorization + sizeof bearer - 1, token);
}

int kace_serve_admit(const kace_serve_guard *g, const kace_serve_head *h, char *msg, size_t msg_size)
{
    const char *method = h->method ? h->method : "";
    bool safe = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0 || strcmp(method, "OPTIONS") == 0;
    if (!safe && h->origin && !allowed_origin(g, h->origin, h->host)) {
        snprintf(msg, msg_size,
                 "cross-origin request refused: Origin '%.200s' is not this server (Host '%.200s'); "
                 "kace serve --allow-origin ORIGIN admits another",
                 h->origin, h->host ? h->host : "");
        return 403;
    }
    bool extender = kace_route_is_extender(h->route);
    if (h->extender_listener && !extender && h->route != KACE_ROUTE_HEALTH) {
        snprintf(msg, msg_size, "this listener serves only kube-scheduler's extender (/k8s/filter, /k8s/prioritize, "
                                "/k8s/bind) and /healthz");
        return 404;
    }
    if (!h->extender_listener && extender && g->extender_elsewhere) {
        snprintf(msg, msg_size, "the extender's routes are served on kace serve's extender listener only "
                                "(--extender-listen), which kube-scheduler alone reaches");
        return 404;
    }
    /* Whoever reaches the extender listener is kube-scheduler (loopback in
     * its pod, or a verified client certificate); on any other listener a
     * token, once set, guards everything that changes or reveals state. */
    /* With named agents, an observation's sender is the agent whose token
     * it carries: the administrator's token names no one. */
    const char *a = h->authorization;
    bool agent_route = g->agents && !h->extender_listener && strcmp(method, "OPTIONS") != 0 &&
                       (h->route == KACE_ROUTE_OBSERVE || h->route == KACE_ROUTE_K8S_NODES);
    if (agent_route) {
        if (!kace_agent_of(g->agents, a) && !(h->route == KACE_ROUTE_K8S_NODES && g->token && bearer_is(a, g->token))) {
            snprintf(msg, msg_size, "%s", a ? "not the bearer token of an agent (kace serve --agent-tokens)"
                                            : "this endpoint needs 'Authorization: Bearer <an agent's token>'");
            return 401;
        }
    } else if (g->token && !h->extender_listener && h->route != KACE_ROUTE_HEALTH && strcmp(method, "OPTIONS") != 0) {
        if (!bearer_is(a, g->token)) {
            snprintf(msg, msg_size, "%s", a ? "wrong bearer token" : "this endpoint needs 'Authorization: Bearer <token>'");
            return 401;
        }
    }
    if (strcmp(method, "POST") != 0)
        return 0;
    if (!is_json_type(h->content_type)) {
        snprintf(msg, msg_size, "Content-Type must be application/json, not '%.200s'",
                 h->content_type ? h->content_type : "(none)");
        return 415;
    }
    return 0;
}

/* ---- errors ---------------------------------------------------------- */

int kace_serve_http_status(kace_status st)
{
    switch (st) {
    case KACE_OK: return 200;
    case KACE_ERR_PARSE:
    case KACE_ERR_INVALID: return 400;
    case KACE_ERR_NOT_FOUND:
    case KACE_ERR_MODEL:
    case KACE_ERR_UNSUPPORTED: return 422;
    default: return 500;
    }
}

static const char *http_code_name(int status)
{
    switch (status) {
    case 400: return "bad_request";
    case 401: return "unauthorized";
    case 403: return "forbidden";
    case 404: return "not_found";
    case 405: return "method_not_allowed";
    case 413: return "body_too_large";
    case 415: return "unsupported_media_type";
    case 422: return "unprocessable";
    case 503: return "unavailable";
    default: return status >= 500 ? "internal" : "error";
    }
}

char *kace_serve_error_json(int http_status, const char *message)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *err = root ? cJSON_AddObjectToObject(root, "error") : NULL;
    char *text = NULL;
    if (err && cJSON_AddNumberToObject(err, "status", http_status) &&
        cJSON_AddStringToObject(err, "code", http_code_name(http_status)) &&
        cJSON_AddStringToObject(err, "message", message && *message ? message : http_code_name(http_status)))
        text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

void kace_reply_clear(kace_reply *reply)
{
    free(reply->body);
    free(reply->api_path);
    free(reply->api_body);
    memset(reply, 0, sizeof *reply);
}

/* ---- request parsing --------------------------------------------------- */

static kace_status kace_serve_parse_object(kace_ctx *ctx, kace_route route, const char *body, size_t len,
                                           cJSON **out)
{
    *out = NULL;
    if (!body || len == 0)
        return kace_fail(ctx, KACE_ERR_PARSE, "request body:1:1: empty (expected a JSON object)");
    if (len > kace_serve_body_limit(route))
        return kace_fail(ctx, KACE_ERR_INVALID, "request body: %zu bytes, more than the %zu allowed", len,
                         kace_serve_body_limit(route));
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (root) { /* only white space may follow the value */
        while (end < body + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r'))
            end++;
        if (end < body + len) {
            cJSON_Delete(root);
            root = NULL;
        }
    }
    if (!root) {
        if (!end || end < body || end > body + len)
            end = body;
        int line = 1, col = 1;
        for (const char *p = body; p < end; p++, col++)
            if (*p == '\n') {
                line++;
                col = 0;
            }
        return kace_fail(ctx, KACE_ERR_PARSE, "request body:%d:%d: malformed JSON (expected one JSON object)", line,
                         col);
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return kace_fail(ctx, KACE_ERR_INVALID, "request body: expected a JSON object");
    }
    *out = root;
    return KACE_OK;
}

/* Refuses fields the endpoint does not know (a typo would go unnoticed). */
static kace_status check_fields(kace_ctx *ctx, const cJSON *obj, const char *where, const char *const *known)
{
    for (const cJSON *it = obj->child; it; it = it->next) {
        bool ok = false;
        for (const char *const *k = known; *k && !ok; k++)
            ok = it->string && strcasecmp(it->string, *k) == 0;
        if (!ok) {
            char list[256] = "";
            for (const char *const *k = known; *k; k++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k == known ? "" : ", ", *k);
            return kace_fail(ctx, KACE_ERR_INVALID, "%s: unknown field '%.64s' (expected %s)", where,
                             it->string ? it->string : "", list);
        }
    }
    return KACE_OK;
}

static kace_status kace_serve_workload(kace_ctx *ctx, const kace_advisor *a, const cJSON *item, const char *where,
                                       int *w)
{
    if (!cJSON_IsString(item) || !item->valuestring)
        return kace_fail(ctx, KACE_ERR_INVALID, "%s must be a workload name (a string)", where);
    *w = kace_dataset_find(a->ds, item->valuestring);
    if (*w < 0)
        return kace_fail(ctx, KACE_ERR_NOT_FOUND, "%s: unknown workload '%.128s' (GET /v1/workloads lists them)",
                         where, item->valuestring);
    return KACE_OK;
}

static kace_status kace_serve_workload_list(kace_ctx *ctx, const kace_advisor *a, const cJSON *arr,
                                            const char *where, int max, int *idx, int *n)
{
    *n = 0;
    if (!cJSON_IsArray(arr))
        return kace_fail(ctx, KACE_ERR_INVALID, "%s must be an array of workload names", where);
    int size = cJSON_GetArraySize(arr);
    if (size > max)
        return kace_fail(ctx, KACE_ERR_INVALID, "%s has %d names, at most %d allowed", where, size, max);
    for (const cJSON *it = arr->child; it; it = it->next) {
        char item_where[96];
        snprintf(item_where, sizeof item_where, "%s[%d]", where, *n);
        kace_status st = kace_serve_workload(ctx, a, it, item_where, &idx[*n]);
        if (st)
            return st;
        (*n)++;
    }
    return KACE_OK;
}

/* An optional number in [lo, hi]; *v keeps its default when absent. */
static kace_status get_number(kace_ctx *ctx, const cJSON *obj, const char *field, double lo, double hi, double *v)
{
    const cJSON *it = cJSON_GetObjectItem(obj, field);
    if (!it || cJSON_IsNull(it))
        return KACE_OK;
    if (!cJSON_IsNumber(it) || !(it->valuedouble >= lo && it->valuedouble <= hi))
        return kace_fail(ctx, KACE_ERR_INVALID, "field '%s' must be a number in [%g, %g]", field, lo, hi);
    *v = it->valuedouble;
    return KACE_OK;
}

static kace_status get_int(kace_ctx *ctx, const cJSON *obj, const char *field, int lo, int hi, int *v)
{
    double d = *v;
    kace_status st = get_number(ctx, obj, field, lo, hi, &d);
    if (st)
        return st;
    if (d != floor(d))
        return kace_fail(ctx, KACE_ERR_INVALID, "field '%s' must be an integer in [%d, %d]", field, lo, hi);
    *v = (int)d;
    return KACE_OK;
}

static kace_status require(kace_ctx *ctx, const cJSON *obj, const char *field, const cJSON **out)
{
    *out = cJSON_GetObjectItem(obj, field);
    if (!*out || cJSON_IsNull(*out))
        return kace_fail(ctx, KACE_ERR_INVALID, "request body: field '%s' is required", field);
    return KACE_OK;
}

/* The optional "objective" of a request: absent or null, the advisor's
 * (kace serve --objective), else the route's own dflt. */
static kace_status get_objective(kace_ctx *ctx, const kace_advisor *a, const cJSON *obj, kace_objective dflt,
                                 kace_objective *o)
{
    const cJSON *it = cJSON_GetObjectItem(obj, "objective");
    *o = kace_advisor_objective(a, dflt);
    if (!it || cJSON_IsNull(it))
        return KACE_OK;
    int found = cJSON_IsString(it) ? kace_objective_from_name(it->valuestring) : -1;
    if (found < 0) {
        char given[80] = "a string";
        if (cJSON_IsString(it))
            snprintf(given, sizeof given, "'%.64s'", it->valuestring);
        else if (!cJSON_IsNumber(it) && !cJSON_IsBool(it))
            snprintf(given, sizeof given, "%s", cJSON_IsArray(it) ? "an array" : "an object");
        else
            snprintf(given, sizeof given, "%s", cJSON_IsNumber(it) ? "a number" : "a boolean");
        return kace_fail(ctx, KACE_ERR_INVALID,
                         "field 'objective' must be \"raw\" (throughput sum), \"normalized\" (sum of each member's "
                         "share of its exclusive throughput) or \"fair\" (the smallest share), not %s",
                         given);
    }
    *o = (kace_objective)found;
    return KACE_OK;
}

/* Written with one "%.17g" (exact round trip) as a raw JSON value: cJSON's
 * own number printing tries "%1.15g", reads it back with sscanf and often
 * prints "%1.17g" too, which was a fifth of a partner ranking's time. */
static cJSON *kace_serve_add_number(cJSON *obj, const char *name, double v)
{
    if (!isfinite(v))
        return cJSON_AddNullToObject(obj, name);
    char text[32];
    snprintf(text, sizeof text, "%.17g", v);
    return cJSON_AddRawToObject(obj, name, text);
}

static cJSON *add_names(cJSON *obj, const char *field, const kace_dataset *ds, const int *w, int n)
{
    cJSON *arr = cJSON_AddArrayToObject(obj, field);
    for (int i = 0; arr && i < n; i++)
        if (!cJSON_AddItemToArray(arr, cJSON_CreateString(ds->workloads[w[i]].name)))
            return NULL;
    return arr;
}

/* ---- predictions -------------------------------------------------------- */

static double exclusive_of(const kace_advisor *a, int w)
{
    return a->ds->workloads[w].metric[KACE_M_EXCLUSIVE];
}

/* Sum, confidence and (slowdown model) member throughputs of a group. A
 * workload alone keeps its exclusive throughput by definition. */
static kace_status predict_group(kace_ctx *ctx, const kace_advisor *a, const int *group, int k, double *sum,
                                 double *confidence, double *member)
{
    for (int i = 0; i < k; i++)
        member[i] = NAN;
    *confidence = 1;
    if (k == 1) {
        double x = exclusive_of(a, group[0]);
        if (!(x > 0))
            return kace_fail(ctx, KACE_ERR_INVALID, "workload '%s' has no positive exclusive throughput",
                             a->ds->workloads[group[0]].name);
        *sum = member[0] = x;
        return KACE_OK;
    }
    return kace_predict_group(ctx, kace_advisor_predictor(a), a->ds, group, k, sum, confidence, member);
}

static kace_status need_members(kace_ctx *ctx, const kace_advisor *a, const char *what)
{
    if (!kace_predictor_can(kace_advisor_predictor(a), KACE_PRED_MEMBERS))
        return kace_fail(ctx, KACE_ERR_UNSUPPORTED,
                         "%s needs each workload's predicted throughput, which only the slowdown model gives (this "
                         "server has a %s model; kace train --kind slowdown)",
                         what, model_kind_name(a));
    return KACE_OK;
}

static kace_status handle_predict(kace_ctx *ctx, const kace_advisor *a, const cJSON *req, cJSON *out)
{
    static const char *const known[] = {"workloads", "objective", NULL};
    const cJSON *list;
    int group[KACE_MAX_K], k = 0;
    kace_objective o;
    kace_status st;
    if ((st = check_fields(ctx, req, "request body", known)) || (st = require(ctx, req, "workloads", &list)) ||
        (st = kace_serve_workload_list(ctx, a, list, "workloads", KACE_MAX_K, group, &k)) ||
        (st = get_objective(ctx, a, req, KACE_OBJ_RAW, &o)))
        return st;
    if (k < 1)
        return kace_fail(ctx, KACE_ERR_INVALID, "workloads must name 1..%d workloads", KACE_MAX_K);
    double sum, conf, member[KACE_MAX_K];
    if ((st = predict_group(ctx, a, group, k, &sum, &conf, member)))
        return st;
    double exclusive = 0, normalized = 0;
    bool members = true;
    for (int i = 0; i < k; i++) {
        exclusive += exclusive_of(a, group[i]);
        normalized += member[i] / exclusive_of(a, group[i]);
        members &= isfinite(member[i]);
    }
    /* the others need each member's throughput: null from a model of sums */
    double value = o == KACE_OBJ_RAW ? sum : members ? kace_objective_of(o, a->ds, group, k, member) : NAN;
    add_names(out, "workloads", a->ds, group, k);
    cJSON_AddStringToObject(out, "model", model_kind_name(a));
    kace_serve_add_number(out, "predicted_sum", sum);
    kace_serve_add_number(out, "measured_sum", kace_advisor_measured_group(a, group, k));
    kace_serve_add_number(out, "exclusive_sum", exclusive);
    kace_serve_add_number(out, "normalized", normalized);
    kace_serve_add_number(out, "confidence", conf);
    cJSON_AddStringToObject(out, "objective", kace_objective_name(o));
    kace_serve_add_number(out, "predicted", value);
    kace_serve_add_number(out, "measured", kace_advisor_measured_group_by(a, o, group, k));
    cJSON *list_out = cJSON_AddArrayToObject(out, "members");
    for (int i = 0; list_out && i < k; i++) {
        cJSON *m = cJSON_CreateObject();
        if (!cJSON_AddItemToArray(list_out, m))
            break;
        cJSON_AddStringToObject(m, "workload", a->ds->workloads[group[i]].name);
        kace_serve_add_number(m, "predicted", member[i]);
        kace_serve_add_number(m, "exclusive", exclusive_of(a, group[i]));
        kace_serve_add_number(m, "fraction", member[i] / exclusive_of(a, group[i]));
    }
    return KACE_OK;
}

/* One ranked partner as the reply lists it: its predicted and measured
 * values are the objective's, named "_sum" only where they are sums in
 * samples/s (raw). */
static cJSON *add_partner(cJSON *list, const kace_advisor *a, kace_objective obj, const kace_partner *p)
{
    cJSON *o = cJSON_CreateObject();
    if (!cJSON_AddItemToArray(list, o))
        return NULL;
    bool raw = obj == KACE_OBJ_RAW;
    cJSON_AddStringToObject(o, "workload", a->ds->workloads[p->workload].name);
    kace_serve_add_number(o, raw ? "predicted_sum" : "predicted", p->predicted);
    kace_serve_add_number(o, raw ? "measured_sum" : "measured", p->measured);
    kace_serve_add_number(o, "exclusive_sum", p->exclusive_sum);
    kace_serve_add_number(o, "confidence", p->confidence);
    return o;
}

/* The fields of a partner request: target, top (0 = all), among (NULL
 * when absent or null) and the objective. */
static kace_status parse_partners(kace_ctx *ctx, const kace_advisor *a, const cJSON *req, int *target, int *top,
                                  const cJSON **among, kace_objective *o)
{
    static const char *const known[] = {"target", "among", "top", "objective", NULL};
    const cJSON *target_item, *among_item = cJSON_GetObjectItem(req, "among");
    kace_status st;
    *top = 0;
    if ((st = check_fields(ctx, req, "request body", known)) || (st = require(ctx, req, "target", &target_item)) ||
        (st = kace_serve_workload(ctx, a, target_item, "target", target)) ||
        (st = get_int(ctx, req, "top", 0, 1 << 20, top)) || (st = get_objective(ctx, a, req, KACE_OBJ_RAW, o)))
        return st;
    *among = among_item && !cJSON_IsNull(among_item) ? among_item : NULL;
    return KACE_OK;
}

static kace_status handle_partners(kace_ctx *ctx, const kace_advisor *a, const cJSON *req, cJSON *out)
{
    const cJSON *among_item;
    int target, top, n_among = 0;
    int *among = NULL;
    kace_partner *ranked = NULL;
    kace_objective o;
    kace_status st;
    if ((st = parse_partners(ctx, a, req, &target, &top, &among_item, &o)))
        return st;
    bool with_among = among_item != NULL;
    size_t cap = with_among ? MAX_LIST : a->ds->n_workloads;
    among = malloc((cap ? cap : 1) * sizeof *among);
    ranked = calloc(cap ? cap : 1, sizeof *ranked);
    if (!among || !ranked) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (with_among && (st = kace_serve_workload_list(ctx, a, among_item, "among", MAX_LIST, among, &n_among)))
        goto done;
    size_t n = 0;
    if ((st = kace_advisor_rank_partners(ctx, a, o, target, with_among ? among : NULL, (size_t)n_among, ranked, &n)))
        goto done;
    cJSON_AddStringToObject(out, "target", a->ds->workloads[target].name);
    cJSON_AddStringToObject(out, "model", model_kind_name(a));
    cJSON_AddStringToObject(out, "objective", kace_objective_name(o));
    cJSON *list = cJSON_AddArrayToObject(out, "partners");
    for (size_t i = 0; list && i < n && (top <= 0 || (int)i < top); i++)
        if (!add_partner(list, a, o, &ranked[i]))
            break;
done:
    free(among);
    free(ranked);
    return st;
}

/* ---- the reply cache ---------------------------------------------------------
 *
 * A partner ranking without "among" depends only on the advisor, the
 * objective and the target: the cache keeps, per objective and target,
 * the ranking over every workload
 * already rendered as the reply's pieces (the head up to "partners":[ and
 * each partner's object), so that any "top" is answered by joining pieces,
 * byte for byte what handle_partners prints. A target's entry is built by
 * the first request that asks for it and published with one atomic
 * compare-and-swap (two threads may build the same; one keeps its own);
 * entries live as long as the cache, which lives as long as its advisor:
 * a reload builds a new advisor with a new, empty cache. */

#define CACHE_BUDGET (32u << 20) /* bytes of rendered pieces per cache; past it, replies are computed */

typedef struct ranked_reply {
    size_t n;           /* partners */
    size_t bytes;       /* what it holds, against CACHE_BUDGET */
    char *head;         /* {"target":...,"model":...,"objective":...,"partners":[ */
    size_t head_len;
    char **item;        /* each partner's object */
    size_t *item_len;
} ranked_reply;

struct kace_reply_cache {
    const kace_advisor *a;
    size_t n;                       /* targets: the advisor's workloads */
    _Atomic(ranked_reply *) *entry; /* per objective, per target (entry[o * n + target]), NULL until asked */
    atomic_size_t bytes;            /* held by the entries */
};

static void ranked_reply_free(ranked_reply *r)
{
    if (!r)
        return;
    for (size_t i = 0; r->item && i < r->n; i++)
        free(r->item[i]);
    free(r->item);
    free(r->item_len);
    free(r->head);
    free(r);
}

kace_status kace_reply_cache_new(kace_ctx *ctx, const kace_advisor *a, kace_reply_cache **out)
{
    kace_reply_cache *c = calloc(1, sizeof *c);
    size_t n = a->ds->n_workloads;
    if (c)
        c->entry = calloc(n ? KACE_N_OBJECTIVES * n : 1, sizeof *c->entry);
    if (!c || !c->entry) {
        free(c);
        *out = NULL;
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    c->a = a;
    c->n = n;
    for (size_t i = 0; i < KACE_N_OBJECTIVES * n; i++)
        atomic_init(&c->entry[i], NULL);
    atomic_init(&c->bytes, 0);
    *out = c;
    return KACE_OK;
}

void kace_reply_cache_free(kace_reply_cache **c)
{
    if (!c || !*c)
        return;
    for (size_t i = 0; i < KACE_N_OBJECTIVES * (*c)->n; i++)
        ranked_reply_free(atomic_load(&(*c)->entry[i]));
    free((*c)->entry);
    free(*c);
    *c = NULL;
}

size_t kace_reply_cache_entries(const kace_reply_cache *c)
{
    size_t n = 0;
    for (size_t i = 0; c && i < KACE_N_OBJECTIVES * c->n; i++)
        n += atomic_load(&((kace_reply_cache *)c)->entry[i]) != NULL;
    return n;
}

/* Renders target's ranking over every workload under objective o into pieces. */
static kace_status ranked_reply_build(kace_ctx *ctx, const kace_advisor *a, kace_objective o, int target,
                                      ranked_reply **out)
{
    *out = NULL;
    size_t cap = a->ds->n_workloads, n = 0;
    kace_partner *ranked = calloc(cap ? cap : 1, sizeof *ranked);
    ranked_reply *r = calloc(1, sizeof *r);
    cJSON *head = cJSON_CreateObject(), *one = cJSON_CreateArray();
    kace_status st = ranked && r && head && one ? KACE_OK : kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    if (!st)
        st = kace_advisor_rank_partners(ctx, a, o, target, NULL, 0, ranked, &n);
    if (!st && (!(r->item = calloc(n ? n : 1, sizeof *r->item)) || !(r->item_len = calloc(n ? n : 1, sizeof *r->item_len))))
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    if (!st) { /* the head: the reply with no partners, "]}" cut off */
        cJSON_AddStringToObject(head, "target", a->ds->workloads[target].name);
        cJSON_AddStringToObject(head, "model", model_kind_name(a));
        cJSON_AddStringToObject(head, "objective", kace_objective_name(o));
        cJSON_AddArrayToObject(head, "partners");
        r->head = cJSON_PrintUnformatted(head);
        r->head_len = r->head ? strlen(r->head) : 0;
        if (r->head_len < 2 || strcmp(r->head + r->head_len - 2, "]}") != 0)
            st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        else
            r->head[r->head_len -= 2] = '\0';
        r->bytes = r->head_len + n * (sizeof *r->item + sizeof *r->item_len);
    }
    for (size_t i = 0; !st && i < n; i++) { /* each partner alone: [{...}] printed, brackets cut */
        cJSON *item = add_partner(one, a, o, &ranked[i]);
        char *text = item ? cJSON_PrintUnformatted(one) : NULL;
        size_t len = text ? strlen(text) : 0;
        cJSON_DeleteItemFromArray(one, 0);
        if (len < 2) {
            free(text);
            st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
            break;
        }
        memmove(text, text + 1, len - 2);
        text[len - 2] = '\0';
        r->item[i] = text;
        r->item_len[i] = len - 2;
        r->n = i + 1;
        r->bytes += len - 2;
    }
    cJSON_Delete(head);
    cJSON_Delete(one);
    free(ranked);
    if (st) {
        ranked_reply_free(r);
        return st;
    }
    *out = r;
    return KACE_OK;
}

/* The reply listing the first top partners (all when top <= 0). */
static kace_status partners_join(kace_ctx *ctx, const ranked_reply *r, int top, char **body)
{
    size_t m = top <= 0 || (size_t)top > r->n ? r->n : (size_t)top, len = r->head_len + 2 + (m ? m - 1 : 0);
    for (size_t i = 0; i < m; i++)
        len += r->item_len[i];
    char *text = malloc(len + 1), *at = text;
    if (!text)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    memcpy(at, r->head, r->head_len);
    at += r->head_len;
    for (size_t i = 0; i < m; i++) {
        if (i)
            *at++ = ',';
        memcpy(at, r->item[i], r->item_len[i]);
        at += r->item_len[i];
    }
    memcpy(at, "]}", 3);
    *body = text;
    return KACE_OK;
}

/* The cached reply to a partner request without "among": *body NULL when
 * the cache does not answer it (then the request is computed). */
static kace_status partners_cached(kace_ctx *ctx, const kace_advisor *a, kace_reply_cache *c, const cJSON *req,
                                   char **body)
{
    const cJSON *among;
    int target, top;
    kace_objective o;
    kace_status st;
    *body = NULL;
    if ((st = parse_partners(ctx, a, req, &target, &top, &among, &o)) || among || (size_t)target >= c->n)
        return st;
    _Atomic(ranked_reply *) *slot = &c->entry[(size_t)o * c->n + (size_t)target];
    ranked_reply *r = atomic_load_explicit(slot, memory_order_acquire), *mine = NULL;
    if (!r) {
        if ((st = ranked_reply_build(ctx, a, o, target, &mine)))
            return st;
        r = mine;
        if (atomic_fetch_add(&c->bytes, mine->bytes) + mine->bytes <= CACHE_BUDGET) {
            ranked_reply *none = NULL;
            if (atomic_compare_exchange_strong_explicit(slot, &none, mine, memory_order_acq_rel,
                                                        memory_order_acquire))
                mine = NULL; /* kept: the cache owns it now */
            else
                r = none; /* another thread's came first */
        }
        if (mine) /* not kept (cache full, or a duplicate): answers this request only */
            atomic_fetch_sub(&c->bytes, mine->bytes);
    }
    st = partners_join(ctx, r, top, body);
    ranked_reply_free(mine);
    return st;
}

/* ---- placement ------------------------------------------------------------ */

static kace_status handle_place(kace_ctx *ctx, const kace_advisor *a, const cJSON *req, cJSON *out,
                                const char **decision)
{
    static const char *const known[] = {"job", "gpus", "min_confidence", "max_colocation", "objective", NULL};
    static const char *const gpu_known[] = {"id", "running", NULL};
    const cJSON *job_item, *gpus;
    int job, max_k = a->opt.max_colocation;
    double min_conf = a->opt.min_confidence;
    kace_objective obj;
    kace_status st;
    if ((st = need_members(ctx, a, "/v1/place")) || (st = check_fields(ctx, req, "request body", known)) ||
        (st = require(ctx, req, "job", &job_item)) || (st = kace_serve_workload(ctx, a, job_item, "job", &job)) ||
        (st = require(ctx, req, "gpus", &gpus)) || (st = get_number(ctx, req, "min_confidence", 0, 1, &min_conf)) ||
        (st = get_int(ctx, req, "max_colocation", 1, KACE_MAX_K, &max_k)) ||
        (st = get_objective(ctx, a, req, KACE_OBJ_NORMALIZED, &obj)))
        return st;
    if (!cJSON_IsArray(gpus) || cJSON_GetArraySize(gpus) < 1 || cJSON_GetArraySize(gpus) > MAX_LIST)
        return kace_fail(ctx, KACE_ERR_INVALID, "gpus must be an array of 1..%d GPUs ({\"id\", \"running\"})",
                         MAX_LIST);
    cJSON *list = cJSON_CreateArray();
    if (!list)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    int best = -1, best_trusted = -1, index = 0;
    double best_gain = -INFINITY, best_trusted_gain = -INFINITY;
    const char *best_id = NULL, *best_trusted_id = NULL;
    for (const cJSON *g = gpus->child; g; g = g->next, index++) {
        char where[64];
        snprintf(where, sizeof where, "gpus[%d]", index);
        const cJSON *id = cJSON_GetObjectItem(g, "id"), *running = cJSON_GetObjectItem(g, "running");
        int resident[MAX_LIST], n_resident = 0;
        if (!cJSON_IsObject(g)) {
            st = kace_fail(ctx, KACE_ERR_INVALID, "%s must be an object {\"id\", \"running\"}", where);
            break;
        }
        if ((st = check_fields(ctx, g, where, gpu_known)))
            break;
        if (!cJSON_IsString(id) || !id->valuestring[0] || strlen(id->valuestring) > 127) {
            st = kace_fail(ctx, KACE_ERR_INVALID, "%s.id must be a non-empty string of at most 127 bytes", where);
            break;
        }
        char run_where[80];
        snprintf(run_where, sizeof run_where, "%s.running", where);
        if (running && !cJSON_IsNull(running) &&
            (st = kace_serve_workload_list(ctx, a, running, run_where, MAX_LIST, resident, &n_resident)))
            break;
        kace_gpu_score s;
        if ((st = kace_serve_score_gpu(ctx, a, obj, job, resident, n_resident, max_k, &s)))
            break;
        cJSON *o = cJSON_CreateObject();
        if (!cJSON_AddItemToArray(list, o)) {
            st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
            break;
        }
        cJSON_AddStringToObject(o, "id", id->valuestring);
        cJSON_AddBoolToObject(o, "eligible", s.eligible);
        if (!s.eligible)
            cJSON_AddStringToObject(o, "reason", s.reason);
        kace_serve_add_number(o, "gain", s.gain);
        kace_serve_add_number(o, "job_fraction", s.job_fraction);
        kace_serve_add_number(o, "before", s.before);
        kace_serve_add_number(o, "after", s.after);
        if (obj == KACE_OBJ_NORMALIZED) { /* the names before objectives, for the clients that read them */
            kace_serve_add_number(o, "normalized_before", s.before);
            kace_serve_add_number(o, "normalized_after", s.after);
        }
        kace_serve_add_number(o, "confidence", s.confidence);
        if (!s.eligible)
            continue;
        if (s.gain > best_gain) {
            best_gain = s.gain;
            best = index;
            best_id = id->valuestring;
        }
        if (s.confidence >= min_conf && s.gain > best_trusted_gain) {
            best_trusted_gain = s.gain;
            best_trusted = index;
            best_trusted_id = id->valuestring;
        }
    }
    if (st) {
        cJSON_Delete(list);
        return st;
    }
    cJSON_AddStringToObject(out, "job", a->ds->workloads[job].name);
    if (best_trusted >= 0) {
        cJSON_AddStringToObject(out, "gpu", best_trusted_id);
        *decision = best_trusted == best ? kace_advisor_policy(a) : "confidence-fallback";
    } else {
        cJSON_AddNullToObject(out, "gpu");
        cJSON_AddStringToObject(out, "reason", best >= 0 ? "every eligible GPU is below min_confidence"
                                                          : "no GPU has room for the job");
        *decision = "none";
    }
    (void)best_id;
    cJSON_AddStringToObject(out, "policy", *decision);
    cJSON_AddStringToObject(out, "objective", kace_objective_name(obj));
    cJSON_AddItemToObject(out, "gpus", list);
    return KACE_OK;
}

/* ---- MPS split --------------------------------------------------------------
 *
 * Candidates: every split of the GPU in 10% steps (each member >= 10%,
 * adding up to 100), then "no split" (everyone at 100%). Each candidate's
 * per-member throughput is predicted by
 *  - the advisor's split model (include/kace/split.h, fitted at load on the
 *    store's partitions_* campaigns) when it has one and every member has the
 *    profile it reads: "method": "split-model";
 *  - otherwise the profile rule, the documented fallback: the published
 *    partition campaigns show that with the GPU split between clients each
 *    one keeps 96-99% (median, per share) of what it achieves alone at its
 *    share, against 86% when both run at 100%, so member i at p% is predicted
 *    at exclusive(i) * exclusive_mps<p>(i) / exclusive_mps100(i), and "no
 *    split" by the slowdown model: "method": "mps-profile".
 * The advice is the candidate with the best kace_split_value under the
 * request's policy (max-sum, max-min, or latency: member ls_member keeps
 * ls_target of its exclusive throughput, asked of the split model with its
 * over-prediction margin) among those that keep every member's
 * min_fraction; ties go to the earlier candidate, as in kace_split_advise.
 * tests/test_serve.c checks the choice against kace_split_advise and scores
 * the rule on the partition campaigns. */

typedef struct split_candidate {
    int pct[KACE_MAX_K];
    double predicted[KACE_MAX_K];
    double sum, normalized, value;
    bool feasible; /* every member keeps its min_fraction */
} split_candidate;

static void enumerate_splits(int k, int at, int left, int *pct, split_candidate *out, int *n, int max)
{
    if (at == k - 1) {
        if (left >= 10 && *n < max) {
            pct[at] = left;
            memcpy(out[*n].pct, pct, (size_t)k * sizeof *pct);
            (*n)++;
        }
        return;
    }
    for (int p = 10; p <= left - 10 * (k - 1 - at); p += 10) {
        pct[at] = p;
        enumerate_splits(k, at + 1, left - p, pct, out, n, max);
    }
}

/* The request's policy and its latency target. */
static kace_status parse_split_goal(kace_ctx *ctx, const cJSON *req, int k, kace_split_goal *goal)
{
    const cJSON *policy = cJSON_GetObjectItem(req, "policy"), *target = cJSON_GetObjectItem(req, "ls_target"),
                *member = cJSON_GetObjectItem(req, "ls_member");
    *goal = (kace_split_goal){.policy = KACE_SPLIT_MAX_SUM, .ls_member = 0, .ls_target = 0.8};
    if (policy && !cJSON_IsNull(policy)) {
        int p = KACE_SPLIT_N_POLICIES;
        if (cJSON_IsString(policy))
            for (p = 0; p < KACE_SPLIT_N_POLICIES; p++)
                if (strcmp(policy->valuestring, kace_split_policy_name((kace_split_policy)p)) == 0)
                    break;
        if (p == KACE_SPLIT_N_POLICIES)
            return kace_fail(ctx, KACE_ERR_INVALID, "policy must be \"max-sum\", \"max-min\" or \"latency\"");
        goal->policy = (kace_split_policy)p;
    }
    if (target && !cJSON_IsNull(target)) {
        if (!cJSON_IsNumber(target) || !(target->valuedouble > 0 && target->valuedouble <= 1))
            return kace_fail(ctx, KACE_ERR_INVALID, "ls_target must be a number in (0, 1]");
        goal->ls_target = target->valuedouble;
    }
    if (member && !cJSON_IsNull(member)) {
        if (!cJSON_IsNumber(member) || member->valuedouble != floor(member->valuedouble) ||
            !(member->valuedouble >= 0 && member->valuedouble < k))
            return kace_fail(ctx, KACE_ERR_INVALID, "ls_member must be an index into workloads (0..%d)", k - 1);
        goal->ls_member = (int)member->valuedouble;
    }
    return KACE_OK;
}

static kace_status handle_mps_split(kace_ctx *ctx, const kace_advisor *a, const cJSON *req, cJSON *out,
                                    const char **decision)
{
    static const char *const known[] = {"workloads", "min_fraction", "policy", "ls_target", "ls_member", NULL};
    const cJSON *list, *minf = cJSON_GetObjectItem(req, "min_fraction");
    int group[KACE_MAX_K], k = 0;
    double min_fraction[KACE_MAX_K] = {0}, exclusive[KACE_MAX_K];
    kace_split_goal goal;
    kace_status st;
    if ((st = check_fields(ctx, req, "request body", known)) || (st = require(ctx, req, "workloads", &list)) ||
        (st = kace_serve_workload_list(ctx, a, list, "workloads", KACE_MAX_K, group, &k)))
        return st;
    if (k < 2)
        return kace_fail(ctx, KACE_ERR_INVALID, "workloads must name 2..%d workloads to split a GPU between",
                         KACE_MAX_K);
    if ((st = parse_split_goal(ctx, req, k, &goal)))
        return st;
    if (minf && !cJSON_IsNull(minf)) {
        if (!cJSON_IsArray(minf) || cJSON_GetArraySize(minf) != k)
            return kace_fail(ctx, KACE_ERR_INVALID, "min_fraction must be an array of %d numbers in [0, 1]", k);
        int i = 0;
        for (const cJSON *it = minf->child; it; it = it->next, i++) {
            if (!cJSON_IsNumber(it) || !(it->valuedouble >= 0 && it->valuedouble <= 1))
                return kace_fail(ctx, KACE_ERR_INVALID, "min_fraction[%d] must be a number in [0, 1]", i);
            min_fraction[i] = it->valuedouble;
        }
    }
    for (int i = 0; i < k; i++) {
        exclusive[i] = exclusive_of(a, group[i]);
        if (!(exclusive[i] > 0))
            return kace_fail(ctx, KACE_ERR_INVALID, "workload '%s' has no positive exclusive throughput",
                             a->ds->workloads[group[i]].name);
    }
    bool by_model = a->split != NULL;
    for (int i = 0; by_model && i < k; i++)
        by_model = kace_split_workload_ok(a->ds, group[i]);
    /* The rule's "no split" needs member predictions; without a full profile
     * it is left out. The split model predicts 100/100 itself. */
    double sum, conf = NAN, member[KACE_MAX_K];
    bool no_split = by_model || kace_predictor_can(kace_advisor_predictor(a), KACE_PRED_MEMBERS);
    if (!by_model && no_split && predict_group(ctx, a, group, k, &sum, &conf, member) != KACE_OK) {
        no_split = false;
        conf = NAN;
    }
    double need = by_model ? kace_split_model_overshoot(a->split) : 1.0;

    enum { MAX_SPLITS = 128 }; /* compositions of 10 into k >= 2 parts: at most 126 */
    split_candidate *cand = calloc(MAX_SPLITS + 1, sizeof *cand);
    if (!cand)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    int n = 0, pct[KACE_MAX_K];
    enumerate_splits(k, 0, 100, pct, cand, &n, MAX_SPLITS);
    if (no_split) {
        for (int i = 0; i < k; i++)
            cand[n].pct[i] = 100;
        n++;
    }
    int best = -1, kept = 0;
    cJSON *arr = cJSON_CreateArray();
    for (int c = 0; arr && c < n; c++) {
        split_candidate *s = &cand[c];
        bool complete = true;
        if (by_model) {
            if ((st = kace_split_predict(ctx, a->split, a->ds, group, k, s->pct, s->predicted)))
                break;
        } else {
            for (int i = 0; i < k; i++) {
                const kace_workload *w = &a->ds->workloads[group[i]];
                double at_share = w->metric[KACE_M_EXCLUSIVE_MPS10 + s->pct[i] / 10 - 1];
                if (!(at_share > 0)) /* not measured: the curve between measured shares */
                    at_share = kace_split_exclusive_at(w->metric, s->pct[i]);
                s->predicted[i] = no_split && c == n - 1 ? member[i]
                                                         : exclusive[i] * at_share / w->metric[KACE_M_EXCLUSIVE_MPS100];
            }
        }
        s->feasible = true;
        for (int i = 0; i < k; i++) {
            complete &= isfinite(s->predicted[i]);
            s->sum += s->predicted[i];
            s->normalized += s->predicted[i] / exclusive[i];
            s->feasible &= s->predicted[i] / exclusive[i] >= min_fraction[i];
        }
        if (!complete) /* a share a member's curve has not measured and is too short to interpolate */
            continue;
        s->value = kace_split_value(&goal, s->predicted, exclusive, k, need);
        kept++;
        cJSON *o = cJSON_CreateObject();
        if (!cJSON_AddItemToArray(arr, o))
            break;
        cJSON_AddItemToObject(o, "split", cJSON_CreateIntArray(s->pct, k));
        cJSON_AddItemToObject(o, "predicted", cJSON_CreateDoubleArray(s->predicted, k));
        kace_serve_add_number(o, "predicted_sum", s->sum);
        kace_serve_add_number(o, "normalized", s->normalized);
        kace_serve_add_number(o, "value", s->value);
        cJSON_AddBoolToObject(o, "feasible", s->feasible);
        if (s->feasible && (best < 0 || s->value > cand[best].value))
            best = c;
    }
    if (st) {
        cJSON_Delete(arr);
        free(cand);
        return st;
    }
    add_names(out, "workloads", a->ds, group, k);
    cJSON_AddStringToObject(out, "policy", kace_split_policy_name(goal.policy));
    cJSON_AddStringToObject(out, "method", by_model ? "split-model" : "mps-profile");
    if (goal.policy == KACE_SPLIT_LATENCY) {
        cJSON_AddNumberToObject(out, "ls_member", goal.ls_member);
        cJSON_AddNumberToObject(out, "ls_target", goal.ls_target);
        cJSON_AddNumberToObject(out, "ls_margin", need);
    }
    if (best >= 0) {
        cJSON_AddItemToObject(out, "split", cJSON_CreateIntArray(cand[best].pct, k));
        cJSON_AddItemToObject(out, "predicted", cJSON_CreateDoubleArray(cand[best].predicted, k));
        kace_serve_add_number(out, "predicted_sum", cand[best].sum);
        kace_serve_add_number(out, "normalized", cand[best].normalized);
        kace_serve_add_number(out, "value", cand[best].value);
        *decision = by_model ? "split-model" : no_split && best == n - 1 ? kace_advisor_policy(a) : "mps-profile";
    } else {
        cJSON_AddNullToObject(out, "split");
        cJSON_AddStringToObject(out, "reason", kept ? "no split keeps every member's min_fraction"
                                                    : "no exclusive_by_mps_pct profile for these workloads");
        *decision = "none";
    }
    kace_serve_add_number(out, "confidence", conf);
    cJSON_AddItemToObject(out, "candidates", arr);
    free(cand);
    return KACE_OK;
}

/* ---- observations ------------------------------------------------------- */

static kace_status handle_observe(kace_ctx *ctx, const kace_advisor *a, const cJSON *req, cJSON *out,
                                  kace_observation *obs)
{
    static const char *const known[] = {"gpu", "workloads", "throughput", "id", "hostname", "pod", "namespace", NULL};
    const cJSON *gpu, *list, *thr, *id;
    kace_status st;
    memset(obs, 0, sizeof *obs);
    if ((st = check_fields(ctx, req, "request body", known)) || (st = require(ctx, req, "gpu", &gpu)) ||
        (st = require(ctx, req, "workloads", &list)) || (st = require(ctx, req, "throughput", &thr)) ||
        (st = kace_serve_workload_list(ctx, a, list, "workloads", KACE_MAX_K, obs->workload, &obs->k)))
        return st;
    if (!cJSON_IsString(gpu) || !gpu->valuestring[0] || strlen(gpu->valuestring) >= sizeof obs->gpu)
        return kace_fail(ctx, KACE_ERR_INVALID, "gpu must be a non-empty string of at most %zu bytes",
                         sizeof obs->gpu - 1);
    if (obs->k < 1)
        return kace_fail(ctx, KACE_ERR_INVALID, "workloads must name 1..%d workloads", KACE_MAX_K);
    if (!cJSON_IsArray(thr) || cJSON_GetArraySize(thr) != obs->k)
        return kace_fail(ctx, KACE_ERR_INVALID, "throughput must be an array of %d numbers (samples/s, one per workload)",
                         obs->k);
    int i = 0;
    for (const cJSON *it = thr->child; it; it = it->next, i++) {
        if (!cJSON_IsNumber(it) || !(it->valuedouble >= 0 && it->valuedouble < 1e12))
            return kace_fail(ctx, KACE_ERR_INVALID, "throughput[%d] must be a number in [0, 1e12)", i);
        obs->observed[i] = it->valuedouble;
        obs->observed_sum += it->valuedouble;
    }
    double conf;
    if ((st = predict_group(ctx, a, obs->workload, obs->k, &obs->predicted_sum, &conf, obs->predicted)))
        return st;
    snprintf(obs->gpu, sizeof obs->gpu, "%s", gpu->valuestring);
    /* Optional: the reporter's id, so that a stored observation sent twice is kept once. */
    if ((id = cJSON_GetObjectItemCaseSensitive(req, "id"))) {
        if (!cJSON_IsString(id) || !id->valuestring[0] || strlen(id->valuestring) >= sizeof obs->id)
            return kace_fail(ctx, KACE_ERR_INVALID, "id must be a non-empty string of at most %zu bytes",
                             sizeof obs->id - 1);
        snprintf(obs->id, sizeof obs->id, "%s", id->valuestring);
    }
    /* Optional: where it runs, so metrics join DCGM exporter's series. */
    const struct {
        const char *key;
        char *to;
        size_t size;
    } where[] = {{"hostname", obs->hostname, sizeof obs->hostname},
                 {"pod", obs->pod, sizeof obs->pod},
                 {"namespace", obs->pod_namespace, sizeof obs->pod_namespace}};
    for (size_t f = 0; f < sizeof where / sizeof *where; f++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, where[f].key);
        if (!v)
            continue;
        if (!cJSON_IsString(v) || !v->valuestring[0] || strlen(v->valuestring) >= where[f].size)
            return kace_fail(ctx, KACE_ERR_INVALID, "%s must be a non-empty string of at most %zu bytes",
                             where[f].key, where[f].size - 1);
        snprintf(where[f].to, where[f].size, "%s", v->valuestring);
    }
    for (int w = 0; w < obs->k; w++)
        snprintf(obs->label + strlen(obs->label), sizeof obs->label - strlen(obs->label), "%s%s", w ? "+" : "",
                 a->ds->workloads[obs->workload[w]].name);
    cJSON_AddBoolToObject(out, "recorded", true);
    cJSON_AddStringToObject(out, "gpu", obs->gpu);
    cJSON_AddStringToObject(out, "colocation", obs->label);
    kace_serve_add_number(out, "observed_sum", obs->observed_sum);
    kace_serve_add_number(out, "predicted_sum", obs->predicted_sum);
    cJSON_AddItemToObject(out, "predicted", cJSON_CreateDoubleArray(obs->predicted, obs->k));
    return KACE_OK;
}

/* ---- GET endpoints -------------------------------------------------------- */

static kace_status handle_workloads(const kace_advisor *a, cJSON *out)
{
    const kace_feature_set *fs = kace_predictor_features(kace_advisor_predictor(a));
    cJSON *list = cJSON_AddArrayToObject(out, "workloads");
    for (size_t i = 0; list && i < a->ds->n_workloads; i++) {
        const kace_workload *w = &a->ds->workloads[i];
        cJSON *o = cJSON_CreateObject();
        if (!cJSON_AddItemToArray(list, o))
            break;
        bool complete = true;
        for (int j = 0; fs && j < fs->n; j++)
            complete &= !isnan(w->metric[fs->metric[j]]);
        cJSON_AddStringToObject(o, "name", w->name);
        cJSON_AddStringToObject(o, "family", w->family);
        cJSON_AddNumberToObject(o, "batch", w->batch);
        kace_serve_add_number(o, "exclusive", w->metric[KACE_M_EXCLUSIVE]);
        cJSON_AddBoolToObject(o, "profiled", complete);
    }
    return KACE_OK;
}

static kace_status handle_health(const kace_advisor *a, cJSON *out)
{
    cJSON_AddStringToObject(out, "status", "ok");
    cJSON_AddStringToObject(out, "model", model_kind_name(a));
    cJSON_AddNumberToObject(out, "workloads", (double)a->ds->n_workloads);
    cJSON_AddNumberToObject(out, "colocations", (double)a->ds->n_colocations);
    cJSON_AddStringToObject(out, "mps_split", a->split ? "split-model" : "mps-profile");
    cJSON_AddNumberToObject(out, "split_grids", (double)a->split_grids);
    return KACE_OK;
}

kace_status kace_advisor_handle(kace_ctx *ctx, const kace_advisor *a, kace_route route, const char *body, size_t len,
                                kace_reply *reply)
{
    return kace_advisor_handle_k8s(ctx, a, NULL, NAN, route, body, len, reply);
}

kace_status kace_advisor_handle_k8s(kace_ctx *ctx, const kace_advisor *a, kace_k8s_cluster *c, double now,
                                    kace_route route, const char *body, size_t len, kace_reply *reply)
{
    return kace_advisor_handle_cached(ctx, a, NULL, c, now, route, body, len, reply);
}

kace_status kace_advisor_handle_cached(kace_ctx *ctx, const kace_advisor *a, kace_reply_cache *cache,
                                       kace_k8s_cluster *c, double now, kace_route route, const char *body, size_t len,
                                       kace_reply *reply)
{
    memset(reply, 0, sizeof *reply);
    if (cache && cache->a != a)
        cache = NULL; /* another advisor's: never answer from it */
    cJSON *req = NULL, *out = cJSON_CreateObject();
    kace_status st = out ? KACE_OK : kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    bool has_body = route != KACE_ROUTE_WORKLOADS && route != KACE_ROUTE_HEALTH && route != KACE_ROUTE_K8S_STATE;
    if (!st && has_body)
        st = kace_serve_parse_object(ctx, route, body, len, &req);
    if (!st) {
        switch (route) {
        case KACE_ROUTE_PREDICT: st = handle_predict(ctx, a, req, out); break;
        case KACE_ROUTE_PARTNERS:
            if (cache && !(st = partners_cached(ctx, a, cache, req, &reply->body)) && reply->body) {
                reply->decision = kace_advisor_policy(a);
                cJSON_Delete(req);
                cJSON_Delete(out);
                reply->http_status = 200;
                return KACE_OK;
            }
            if (!st)
                st = handle_partners(ctx, a, req, out);
            reply->decision = kace_advisor_policy(a);
            break;
        case KACE_ROUTE_PLACE: st = handle_place(ctx, a, req, out, &reply->decision); break;
        case KACE_ROUTE_MPS_SPLIT: st = handle_mps_split(ctx, a, req, out, &reply->decision); break;
        case KACE_ROUTE_OBSERVE:
            st = handle_observe(ctx, a, req, out, &reply->observation);
            reply->has_observation = st == KACE_OK;
            break;
        case KACE_ROUTE_WORKLOADS: st = handle_workloads(a, out); break;
        case KACE_ROUTE_HEALTH: st = handle_health(a, out); break;
        case KACE_ROUTE_K8S_FILTER: st = kace_serve_k8s_filter(ctx, a, c, now, req, out, &reply->decision); break;
        case KACE_ROUTE_K8S_PRIORITIZE:
            cJSON_Delete(out);
            out = NULL;
            st = kace_serve_k8s_prioritize(ctx, a, c, now, req, &out, &reply->decision);
            break;
        case KACE_ROUTE_K8S_BIND:
            st = kace_serve_k8s_bind(ctx, a, c, now, req, out, &reply->api_path, &reply->api_body, &reply->decision);
            break;
        case KACE_ROUTE_K8S_NODES: st = kace_serve_k8s_report(ctx, c, now, req, out); break;
        case KACE_ROUTE_K8S_STATE: st = kace_serve_k8s_state(ctx, a, c, now, out); break;
        default: st = kace_fail(ctx, KACE_ERR_NOT_FOUND, "no such JSON endpoint"); break;
        }
    }
    cJSON_Delete(req);
    if (!st) {
        reply->http_status = 200;
        reply->body = out ? cJSON_PrintUnformatted(out) : NULL;
        if (!reply->body)
            st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    cJSON_Delete(out);
    if (st) {
        reply->decision = NULL;
        reply->has_observation = false;
        free(reply->api_path);
        free(reply->api_body);
        reply->api_path = reply->api_body = NULL;
        reply->http_status = kace_serve_http_status(st);
        reply->body = kace_serve_error_json(reply->http_status, kace_errmsg(ctx));
    }
    return st;
}
