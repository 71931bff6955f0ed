/* A minimal Kubernetes API client over libcurl (kube_api.h). */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "kube_api.h"

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
#define MAX_REPLY (64u << 20)

typedef struct buffer {
    char *data;
    size_t len;
    int overflow;
} buffer;

static size_t on_data(char *p, size_t size, size_t n, void *user)
{
    buffer *b = user;
    size_t add = size * n;
    if (b->len + add > MAX_REPLY) {
        b->overflow = 1;
        return 0;
    }
    char *grown = realloc(b->data, b->len + add + 1);
    if (!grown)
        return 0;
    memcpy(grown + b->len, p, add);
    b->len += add;
    grown[b->len] = '\0';
    b->data = grown;
    return add;
}

static char *first_line(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *line = calloc(1, 8192);
    if (line && !fgets(line, 8192, f))
        line[0] = '\0';
    fclose(f);
    if (line)
        line[strcspn(line, "\r\n")] = '\0';
    return line;
}

int kube_api_setup(kube_api *k, const char *token_file, char *err, size_t errlen)
{
    static char in_cluster_url[300];
    if (k->url && strcmp(k->url, "in-cluster") == 0) {
        const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
        if (!host || !port) {
            snprintf(err, errlen, "in-cluster: KUBERNETES_SERVICE_HOST/PORT are not set (not in a pod?)");
            return -1;
        }
        snprintf(in_cluster_url, sizeof in_cluster_url, strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s", host,
                 port);
        k->url = in_cluster_url;
        if (!token_file)
            token_file = SA_DIR "/token";
        if (!k->ca_file)
            k->ca_file = SA_DIR "/ca.crt";
    }
    if (token_file) {
        k->token = first_line(token_file);
        if (!k->token || !k->token[0]) {
            snprintf(err, errlen, "cannot read a token from %s", token_file);
            free(k->token);
            k->token = NULL;
            return -1;
        }
    }
    if (k->timeout <= 0)
        k->timeout = 10;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return 0;
}

void kube_api_cleanup(kube_api *k)
{
    free(k->token);
    k->token = NULL;
}

int kube_api_call(const kube_api *k, const char *method, const char *path, const char *content_type,
                  const char *body, long *status, char **reply, char *err, size_t errlen)
{
    *status = 0;
    if (reply)
        *reply = NULL;
    CURL *c = curl_easy_init();
    if (!c) {
        snprintf(err, errlen, "cannot start a curl handle");
        return -1;
    }
    size_t url_len = strlen(k->url) + strlen(path) + 1;
    char *url = malloc(url_len);
    struct curl_slist *headers = NULL;
    char *auth = NULL;
    buffer b = {0};
    int rc = -1;
    if (!url) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    snprintf(url, url_len, "%s%s", k->url, path);
    headers = curl_slist_append(headers, "Accept: application/json");
    if (content_type) {
        char ct[128];
        snprintf(ct, sizeof ct, "Content-Type: %s", content_type);
        headers = curl_slist_append(headers, ct);
    }
    if (k->token) {
        size_t n = strlen(k->token) + 32;
        auth = malloc(n);
        if (auth) {
            snprintf(auth, n, "Authorization: Bearer %s", k->token);
            headers = curl_slist_append(headers, auth);
        }
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(k->timeout * 1000));
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L); /* threads: no SIGALRM for timeouts */
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    if (k->ca_file)
        curl_easy_setopt(c, CURLOPT_CAINFO, k->ca_file);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    CURLcode cc = curl_easy_perform(c);
    if (cc != CURLE_OK) {
        snprintf(err, errlen, "%s %s: %s", method, url, b.overflow ? "reply too large" : curl_easy_strerror(cc));
        goto done;
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    if (*status < 200 || *status > 299) {
        cJSON *j = b.data ? cJSON_Parse(b.data) : NULL;
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(j, "message");
        snprintf(err, errlen, "%s %s: HTTP %ld: %.300s", method, path, *status,
                 cJSON_IsString(msg) ? msg->valuestring : (b.data ? b.data : ""));
        cJSON_Delete(j);
        goto done;
    }
    rc = 0;
done:
    if (reply) {
        *reply = b.data;
        b.data = NULL;
    }
    free(b.data);
    free(auth);
    free(url);
    curl_slist_free_all(headers);
    curl_easy_cleanup(c);
    return rc;
}
