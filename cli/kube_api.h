/* A minimal Kubernetes API client over libcurl: the few calls kace serve
 * (bind) and kace agent (node annotations, pods) make. */
#ifndef KACE_CLI_KUBE_API_H
#define KACE_CLI_KUBE_API_H

#include <stddef.h>

typedef struct kube_api {
    const char *url;     /* e.g. https://kubernetes.default.svc or http://127.0.0.1:PORT */
    char *token;         /* bearer token (malloc'ed), NULL for none */
    const char *ca_file; /* CA bundle for https, NULL for the system's */
    double timeout;      /* seconds per request */
} kube_api;

/* Reads the bearer token from path (first line) into k->token; in-cluster
 * defaults: url from KUBERNETES_SERVICE_HOST/PORT when k->url is "in-cluster",
 * token and CA from /var/run/secrets/kubernetes.io/serviceaccount. Returns 0,
 * or -1 with a message in err. */
int kube_api_setup(kube_api *k, const char *token_file, char *err, size_t errlen);
void kube_api_cleanup(kube_api *k);

/* One request: method, path (from "/api/..."), body (NULL for none) of
 * content_type. *status: the HTTP status (0 when none came); *reply: the
 * body (malloc'ed, may be NULL). Returns 0 when a 2xx came, else -1 with a
 * message in err (the API server's "message" where it sent one). */
int kube_api_call(const kube_api *k, const char *method, const char *path, const char *content_type,
                  const char *body, long *status, char **reply, char *err, size_t errlen);

#endif
