/* A stand-in for the Kubernetes API server: the few endpoints kace serve
 * (bind) and kace agent use, with the API server's behaviour where kace
 * depends on it (tests/cli_k8s_*.sh):
 *
 *   GET   /api/v1/nodes                         NodeList
 *   GET   /api/v1/nodes/NAME                    Node
 *   PATCH /api/v1/nodes/NAME                    merge patch of metadata.annotations (null deletes)
 *   GET   /api/v1/pods[?fieldSelector=spec.nodeName=NODE]   PodList
 *   POST  /api/v1/namespaces/NS/pods            create a Pod (gets a uid)
 *   GET   /api/v1/namespaces/NS/pods/NAME       Pod
 *   DELETE /api/v1/namespaces/NS/pods/NAME      deletes it at once (the pod has ended)
 *   POST  /api/v1/namespaces/NS/pods/NAME/binding   Binding: sets spec.nodeName and copies the
 *         Binding's metadata.annotations onto the pod, as the API server's pod binding does;
 *         409 when the pod is already bound, 404 for an unknown pod or node, 409 on a uid mismatch
 *
 *   fake_kube_api --port-file F [--nodes NODELIST.json] [--token T] [--log F]
 *
 * Every request is logged as "METHOD PATH STATUS BODY" (BODY: the request's
 * JSON on one line, or "-"; to --log, else stdout);
 * with --token, requests without "Authorization: Bearer T" get 401. One
 * thread answers, so the state needs no lock. */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

static cJSON *nodes; /* array of Node */
static cJSON *pods;  /* array of Pod */
static const char *token;
static FILE *log_file;
static const char *request_body; /* logged with the reply (one line), "-" when none */
static unsigned long uid_counter;

typedef struct body {
    char *data;
    size_t len;
} body;

static cJSON *status_object(int code, const char *reason, const char *message)
{
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "kind", "Status");
    cJSON_AddStringToObject(s, "apiVersion", "v1");
    cJSON_AddStringToObject(s, "status", code < 300 ? "Success" : "Failure");
    cJSON_AddStringToObject(s, "message", message);
    cJSON_AddStringToObject(s, "reason", reason);
    cJSON_AddNumberToObject(s, "code", code);
    return s;
}

static enum MHD_Result reply(struct MHD_Connection *c, const char *method, const char *url, int code, cJSON *json)
{
    char *text = cJSON_PrintUnformatted(json);
    cJSON_Delete(json);
    fprintf(log_file, "%s %s %d %s\n", method, url, code, request_body);
    fflush(log_file);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(text ? strlen(text) : 0, text ? text : (char *)"", MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)code, r);
    MHD_destroy_response(r);
    return ok;
}

static const char *meta_string(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "metadata"), key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static cJSON *find(cJSON *list, const char *ns, const char *name)
{
    for (cJSON *it = list->child; it; it = it->next)
        if (strcmp(meta_string(it, "name"), name) == 0 && (!ns || strcmp(meta_string(it, "namespace"), ns) == 0))
            return it;
    return NULL;
}

static cJSON *list_of(const char *kind, cJSON *items)
{
    cJSON *l = cJSON_CreateObject();
    cJSON_AddStringToObject(l, "kind", kind);
    cJSON_AddStringToObject(l, "apiVersion", "v1");
    cJSON_AddObjectToObject(l, "metadata");
    cJSON_AddItemToObject(l, "items", items);
    return l;
}

static cJSON *object_at(cJSON *obj, const char *key)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsObject(v)) {
        cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
        v = cJSON_AddObjectToObject(obj, key);
    }
    return v;
}

/* metadata.annotations of patch merged into obj's (RFC 7386 for that map). */
static void merge_annotations(cJSON *obj, const cJSON *patch_annotations)
{
    cJSON *ann = object_at(object_at(obj, "metadata"), "annotations");
    for (const cJSON *a = patch_annotations ? patch_annotations->child : NULL; a; a = a->next) {
        cJSON_DeleteItemFromObjectCaseSensitive(ann, a->string);
        if (cJSON_IsString(a))
            cJSON_AddStringToObject(ann, a->string, a->valuestring);
    }
}

static enum MHD_Result handle(struct MHD_Connection *c, const char *method, const char *url, const body *b)
{
    char ns[256], name[256], rest[64];
    request_body = "-";
    if (token) {
        const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        if (!auth || strncmp(auth, "Bearer ", 7) != 0 || strcmp(auth + 7, token) != 0)
            return reply(c, method, url, 401, status_object(401, "Unauthorized", "Unauthorized"));
    }
    cJSON *in = b->len ? cJSON_ParseWithLength(b->data, b->len) : NULL;
    char *compact = in ? cJSON_PrintUnformatted(in) : NULL;
    request_body = compact ? compact : "-";
    enum MHD_Result ok;
    if (strcmp(url, "/api/v1/nodes") == 0 && strcmp(method, "GET") == 0) {
        ok = reply(c, method, url, 200, list_of("NodeList", cJSON_Duplicate(nodes, true)));
    } else if (sscanf(url, "/api/v1/nodes/%255[^/]%63s", name, rest) == 1) {
        cJSON *n = find(nodes, NULL, name);
        if (!n)
            ok = reply(c, method, url, 404, status_object(404, "NotFound", "nodes not found"));
        else if (strcmp(method, "GET") == 0)
            ok = reply(c, method, url, 200, cJSON_Duplicate(n, true));
        else if (strcmp(method, "PATCH") == 0 && cJSON_IsObject(in)) {
            const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
            if (!ct || (strcmp(ct, "application/merge-patch+json") != 0 &&
                        strcmp(ct, "application/strategic-merge-patch+json") != 0))
                ok = reply(c, method, url, 415, status_object(415, "UnsupportedMediaType", "unsupported patch type"));
            else {
                merge_annotations(n, cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(in, "metadata"),
                                                                      "annotations"));
                ok = reply(c, method, url, 200, cJSON_Duplicate(n, true));
            }
        } else
            ok = reply(c, method, url, 405, status_object(405, "MethodNotAllowed", "method not allowed"));
    } else if (strcmp(url, "/api/v1/pods") == 0 && strcmp(method, "GET") == 0) {
        const char *sel = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "fieldSelector");
        const char *want = sel && strncmp(sel, "spec.nodeName=", 14) == 0 ? sel + 14 : NULL;
        cJSON *items = cJSON_CreateArray();
        for (cJSON *p = pods->child; p; p = p->next) {
            const cJSON *node = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "spec"), "nodeName");
            if (!want || (cJSON_IsString(node) && strcmp(node->valuestring, want) == 0))
                cJSON_AddItemToArray(items, cJSON_Duplicate(p, true));
        }
        ok = reply(c, method, url, 200, list_of("PodList", items));
    } else if (sscanf(url, "/api/v1/namespaces/%255[^/]/pods/%255[^/]/%63s", ns, name, rest) == 3 &&
               strcmp(rest, "binding") == 0 && strcmp(method, "POST") == 0) {
        cJSON *p = find(pods, ns, name);
        const cJSON *target = cJSON_GetObjectItemCaseSensitive(in, "target");
        const cJSON *tname = cJSON_GetObjectItemCaseSensitive(target, "name");
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(in, "kind");
        const cJSON *spec = p ? cJSON_GetObjectItemCaseSensitive(p, "spec") : NULL;
        const cJSON *bound = spec ? cJSON_GetObjectItemCaseSensitive(spec, "nodeName") : NULL;
        const char *uid = meta_string(in, "uid");
        if (!cJSON_IsObject(in) || !cJSON_IsString(kind) || strcmp(kind->valuestring, "Binding") != 0 ||
            !cJSON_IsString(tname) || strcmp(meta_string(in, "name"), name) != 0)
            ok = reply(c, method, url, 400, status_object(400, "BadRequest", "not a Binding for this pod"));
        else if (!p)
            ok = reply(c, method, url, 404, status_object(404, "NotFound", "pods not found"));
        else if (!find(nodes, NULL, tname->valuestring))
            ok = reply(c, method, url, 404, status_object(404, "NotFound", "nodes not found"));
        else if (uid[0] && strcmp(uid, meta_string(p, "uid")) != 0)
            ok = reply(c, method, url, 409, status_object(409, "Conflict", "Precondition failed: UID mismatch"));
        else if (cJSON_IsString(bound) && bound->valuestring[0])
            ok = reply(c, method, url, 409, status_object(409, "Conflict", "pod is already assigned to a node"));
        else {
            cJSON *sp = object_at(p, "spec");
            cJSON_DeleteItemFromObjectCaseSensitive(sp, "nodeName");
            cJSON_AddStringToObject(sp, "nodeName", tname->valuestring);
            merge_annotations(p, cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(in, "metadata"),
                                                                  "annotations"));
            ok = reply(c, method, url, 201, status_object(201, "", "bound"));
        }
    } else if (sscanf(url, "/api/v1/namespaces/%255[^/]/pods/%255[^/]%63s", ns, name, rest) == 2 &&
               strcmp(method, "GET") == 0) {
        cJSON *p = find(pods, ns, name);
        ok = p ? reply(c, method, url, 200, cJSON_Duplicate(p, true))
               : reply(c, method, url, 404, status_object(404, "NotFound", "pods not found"));
    } else if (sscanf(url, "/api/v1/namespaces/%255[^/]/pods/%255[^/]%63s", ns, name, rest) == 2 &&
               strcmp(method, "DELETE") == 0) {
        cJSON *p = find(pods, ns, name); /* deleted at once: no grace period, no finalizers */
        if (p) {
            cJSON *gone = cJSON_DetachItemViaPointer(pods, p);
            ok = reply(c, method, url, 200, gone);
        } else {
            ok = reply(c, method, url, 404, status_object(404, "NotFound", "pods not found"));
        }
    } else if (sscanf(url, "/api/v1/namespaces/%255[^/]/pod%63s", ns, rest) == 2 && strcmp(rest, "s") == 0 &&
               strcmp(method, "POST") == 0) {
        const char *pn = meta_string(in, "name");
        if (!cJSON_IsObject(in) || !pn[0])
            ok = reply(c, method, url, 400, status_object(400, "BadRequest", "a Pod needs metadata.name"));
        else if (find(pods, ns, pn))
            ok = reply(c, method, url, 409, status_object(409, "AlreadyExists", "pods already exists"));
        else {
            cJSON *p = cJSON_Duplicate(in, true);
            cJSON *meta = object_at(p, "metadata");
            char uid[64];
            snprintf(uid, sizeof uid, "00000000-0000-4000-8000-%012lu", ++uid_counter);
            if (!meta_string(p, "uid")[0]) /* the API server assigns it; a test may fix it beforehand */
                cJSON_AddStringToObject(meta, "uid", uid);
            cJSON_DeleteItemFromObjectCaseSensitive(meta, "namespace");
            cJSON_AddStringToObject(meta, "namespace", ns);
            cJSON_AddItemToArray(pods, p);
            ok = reply(c, method, url, 201, cJSON_Duplicate(p, true));
        }
    } else {
        ok = reply(c, method, url, 404, status_object(404, "NotFound", "the fake API server has no such endpoint"));
    }
    cJSON_Delete(in);
    free(compact);
    request_body = "-";
    return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **state)
{
    (void)cls;
    (void)version;
    body *b = *state;
    if (!b) {
        *state = b = calloc(1, sizeof *b);
        return b ? MHD_YES : MHD_NO;
    }
    if (*upload_size) {
        char *grown = realloc(b->data, b->len + *upload_size + 1);
        if (!grown || b->len + *upload_size > (8u << 20))
            return MHD_NO;
        memcpy(grown + b->len, upload, *upload_size);
        b->len += *upload_size;
        grown[b->len] = '\0';
        b->data = grown;
        *upload_size = 0;
        return MHD_YES;
    }
    return handle(c, method, url, b);
}

static void on_done(void *cls, struct MHD_Connection *c, void **state, enum MHD_RequestTerminationCode why)
{
    (void)cls;
    (void)c;
    (void)why;
    body *b = *state;
    if (b)
        free(b->data);
    free(b);
    *state = NULL;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = n >= 0 ? calloc(1, (size_t)n + 1) : NULL;
    if (text && fread(text, 1, (size_t)n, f) != (size_t)n) {
        free(text);
        text = NULL;
    }
    fclose(f);
    return text;
}

int main(int argc, char **argv)
{
    const char *port_file = NULL, *nodes_file = NULL, *log_path = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--port-file") == 0)
            port_file = argv[i + 1];
        else if (strcmp(argv[i], "--nodes") == 0)
            nodes_file = argv[i + 1];
        else if (strcmp(argv[i], "--token") == 0)
            token = argv[i + 1];
        else if (strcmp(argv[i], "--log") == 0)
            log_path = argv[i + 1];
    }
    if (!port_file) {
        fprintf(stderr, "usage: fake_kube_api --port-file F [--nodes NODELIST.json] [--token T] [--log F]\n");
        return 2;
    }
    log_file = log_path ? fopen(log_path, "a") : stdout;
    if (!log_file)
        return 1;
    nodes = cJSON_CreateArray();
    pods = cJSON_CreateArray();
    if (nodes_file) {
        char *text = read_file(nodes_file);
        cJSON *list = text ? cJSON_Parse(text) : NULL;
        free(text);
        cJSON *items = cJSON_DetachItemFromObjectCaseSensitive(list, "items");
        cJSON_Delete(list);
        if (!cJSON_IsArray(items)) {
            fprintf(stderr, "fake_kube_api: %s is not a NodeList\n", nodes_file);
            return 1;
        }
        cJSON_Delete(nodes);
        nodes = items;
    }
    sigset_t set; /* blocked before the server's thread starts, so only sigwait sees them */
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                                            on_request, NULL, MHD_OPTION_NOTIFY_COMPLETED, on_done, NULL,
                                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_END);
    if (!d)
        return 1;
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%u\n", info ? info->port : 0) < 0 || fclose(f) != 0 || rename(tmp, port_file) != 0)
        return 1;
    int sig;
    sigwait(&set, &sig);
    MHD_stop_daemon(d);
    cJSON_Delete(nodes);
    cJSON_Delete(pods);
    return 0;
}
