#!/usr/bin/env bash
# The Kubernetes manifests of deploy/, checked without a cluster:
#
#   bash cli_k8s_manifests.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR
#
# - every YAML document validates against tests/data/k8s/manifest-schema.json
#   (trimmed from the Kubernetes OpenAPI definitions, python3-jsonschema), and
#   so does the KubeSchedulerConfiguration inside the scheduler's ConfigMap;
# - the extender's verbs are kace serve routes (`kace serve --help`), it is
#   nodeCacheCapable with a weight, and its urlPrefix port is kace serve's
#   extender listener (--extender-listen) in the same pod, on loopback (or
#   HTTPS with client certificates); the main listener, off loopback, has
#   --token-file; a deployment with the extender on the main listener fails;
# - each container running kace uses a kace subcommand and only flags its
#   --help lists; service accounts, config maps and claims referred to exist;
# - tokens: kace serve has --agent-tokens; each token file (--token-file,
#   --agent-tokens, --serve-token-file) is a file of a Secret mounted at its
#   folder, with a mode other users cannot read (kace serve refuses such an
#   agents' file) and kace, as the pod runs, can (Secret files are root's and
#   the fsGroup's); the agent mounts not the admin token's Secret;
# - Prometheus: monitoring/prometheus-scrape.yml sends a token
#   (authorization.credentials_file) to a Service of deploy/ whose target is
#   kace serve's --listen port, which the pod's prometheus.io/port names;
# - RBAC: the account running kace serve may create pods/binding, the one
#   running kace agent may patch nodes and list pods;
# - GPUs: NVIDIA's device plugin shares them with MPS (its ConfigMap's
#   sharing.mps, at least 3 replicas: kace's most pods on a GPU; no
#   time-slicing), its MPS control daemon runs with the same config and MPS
#   root; the example pod and the test fixtures' pods (tests/data/k8s)
#   request one unit of the resource the plugin advertises and set no
#   NVIDIA_VISIBLE_DEVICES, host IPC or host MPS pipe;
#   NVIDIA_VISIBLE_DEVICES=all appears only in privileged containers or
#   utility-only ones (the agent reads NVML);
# - the checker fails a manifest with a misspelt field, a GPU pod without
#   the resource or with NVIDIA_VISIBLE_DEVICES=all, time-slicing (it can fail).
set -u

KACE=${1:?usage: cli_k8s_manifests.sh KACE_BIN SHARED_DATA_DIR SCRATCH_DIR}
SCRATCH=${3:?missing SCRATCH_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
DEPLOY="$HERE/../deploy"
SCRAPE="$HERE/../monitoring/prometheus-scrape.yml"
export LC_ALL=C
python3 -c 'import yaml, jsonschema' 2>/dev/null ||
    { echo "FAIL: python3-yaml and python3-jsonschema are needed (bash .ci/install-deps)" >&2; exit 1; }
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH" || exit 1

cat >"$SCRATCH/check.py" <<'EOF'
import glob, json, os, re, subprocess, sys
import jsonschema, yaml

kace, schema_path, deploy, fixtures, scrape_path = sys.argv[1:6]
with open(schema_path) as f:
    schema = json.load(f)
problems = []

def validate(doc, definition, where):
    sub = dict(schema)
    sub["$ref"] = "#/definitions/" + definition
    for e in jsonschema.Draft7Validator(sub).iter_errors(doc):
        problems.append("%s: %s at %s" % (where, e.message, "/".join(str(p) for p in e.absolute_path)))

docs = []
for path in sorted(glob.glob(os.path.join(deploy, "*.yaml"))):
    with open(path) as f:
        for i, doc in enumerate(yaml.safe_load_all(f)):
            if doc is None:
                continue
            where = "%s #%d (%s %s)" % (os.path.basename(path), i + 1, doc.get("kind"), doc.get("metadata", {}).get("name"))
            if doc.get("kind") not in schema["definitions"]:
                problems.append("%s: kind %s is not in the schema" % (where, doc.get("kind")))
                continue
            validate(doc, doc["kind"], where)
            docs.append((where, doc))
if len(docs) < 8:
    problems.append("only %d documents found in %s" % (len(docs), deploy))

def of_kind(k):
    return [d for _, d in docs if d.get("kind") == k]

def help_of(cmd):
    return subprocess.run([kace, cmd, "--help"], capture_output=True, text=True).stdout

def pod_specs():
    for w, d in docs:
        if d["kind"] in ("Deployment", "DaemonSet"):
            yield w, d, d["spec"]["template"]["spec"]
        elif d["kind"] == "Pod":
            yield w, d, d["spec"]

# kace containers: a real subcommand, real flags
kace_containers = []
for w, d, spec in pod_specs():
    for c in spec["containers"]:
        if c.get("command", [None])[0] != "kace":
            continue
        args = c.get("args", [])
        text = help_of(args[0]) if args else ""
        if not text:
            problems.append("%s: container %s runs 'kace %s', which has no --help" % (w, c["name"], args[:1]))
            continue
        for a in args:
            if a.startswith("--") and not re.search(re.escape(a.split("=")[0]) + r"\b", text):
                problems.append("%s: kace %s has no option %s" % (w, args[0], a))
        kace_containers.append((w, d, spec, c, args))

# the scheduler configuration and its extender
serve = [(w, d, spec, c, a) for w, d, spec, c, a in kace_containers if a[0] == "serve"]
agent = [(w, d, spec, c, a) for w, d, spec, c, a in kace_containers if a[0] == "agent"]
if len(serve) != 1 or len(agent) != 1:
    problems.append("expected one kace serve and one kace agent container, found %d and %d" % (len(serve), len(agent)))
configs = [yaml.safe_load(v) for cm in of_kind("ConfigMap") for v in cm.get("data", {}).values()
           if "KubeSchedulerConfiguration" in v]
if len(configs) != 1:
    problems.append("expected one KubeSchedulerConfiguration, found %d" % len(configs))
serve_help = help_of("serve")
for cfg in configs:
    validate(cfg, "KubeSchedulerConfiguration", "KubeSchedulerConfiguration")
    ext = cfg.get("extenders", [])
    if len(ext) != 1:
        problems.append("expected one extender, found %d" % len(ext))
        continue
    e = ext[0]
    m = re.match(r"^https?://[^/:]+:(\d+)(/.*)$", e["urlPrefix"])
    if not m:
        problems.append("urlPrefix %s has no port and path" % e["urlPrefix"])
        continue
    port, prefix = m.group(1), m.group(2).rstrip("/")
    for verb in ("filterVerb", "prioritizeVerb", "bindVerb"):
        if verb not in e:
            problems.append("the extender has no %s" % verb)
        elif (prefix + "/" + e[verb]) not in serve_help:
            problems.append("%s %s: kace serve has no route %s" % (verb, e[verb], prefix + "/" + e[verb]))
    if not e.get("nodeCacheCapable"):
        problems.append("the extender should be nodeCacheCapable (kace keeps a node cache)")
    if serve:
        # kube-scheduler sends no token: the extender has its own listener,
        # on loopback (a sidecar) or HTTPS with client certificates
        a = serve[0][4]
        listen = a[a.index("--extender-listen") + 1] if "--extender-listen" in a else None
        if not listen:
            problems.append("kace serve has no --extender-listen: the extender's routes would need a token "
                            "kube-scheduler cannot send")
        elif not listen.endswith(":" + port):
            problems.append("the extender calls port %s, kace serve's extender listener is %s" % (port, listen))
        elif not (listen.startswith("127.") or listen.startswith("[::1]")) and "--extender-client-ca" not in a:
            problems.append("the extender listener %s is reachable from the network without client certificates" % listen)
        elif not e["urlPrefix"].startswith("http://127.") and not e.get("enableHTTPS"):
            problems.append("kube-scheduler calls %s, not kace serve's loopback listener" % e["urlPrefix"])
        main = a[a.index("--listen") + 1] if "--listen" in a else "127.0.0.1:8080"
        if not main.startswith("127.") and "--token-file" not in a:
            problems.append("kace serve listens on %s without --token-file" % main)

# token files: Secrets with modes only kace may read; the agent without the admin token
def flag(args, name):
    return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) else None

def secret_file(w, spec, c, path, what):
    """The Secret volume holding path in container c, its file mode; checks who may read it."""
    mounts = {m["mountPath"].rstrip("/"): m["name"] for m in c.get("volumeMounts", [])}
    vol = {v["name"]: v for v in spec.get("volumes", [])}.get(mounts.get(os.path.dirname(path)), {})
    sec = vol.get("secret")
    if not sec:
        problems.append("%s: %s %s is not a file of a Secret mounted at %s" % (w, what, path, os.path.dirname(path)))
        return None
    mode = sec.get("defaultMode", 0o644)
    items = sec.get("items")
    if items is not None:
        item = [i for i in items if i["path"] == os.path.basename(path)]
        if not item:
            problems.append("%s: %s %s is not among the items of Secret %s" % (w, what, path, sec["secretName"]))
            return sec["secretName"]
        mode = item[0].get("mode", mode)
    if mode & 0o007:
        problems.append("%s: %s %s (Secret %s) is readable by other users: mode %04o" % (w, what, path, sec["secretName"], mode))
    psc, csc = spec.get("securityContext", {}), c.get("securityContext", {})
    uid = csc.get("runAsUser", psc.get("runAsUser"))
    # a Secret's files are root's and, with fsGroup, that group's (the kubelet adds group read)
    if uid not in (None, 0):
        if psc.get("fsGroup") is None or not mode & 0o440:
            problems.append("%s: %s %s (Secret %s, mode %04o) is root's: kace, as uid %s without an fsGroup, cannot read it"
                            % (w, what, path, sec["secretName"], mode, uid))
    elif not mode & 0o400:
        problems.append("%s: %s %s (Secret %s) has mode %04o: not even its owner may read it" % (w, what, path, sec["secretName"], mode))
    return sec["secretName"]

admin_secrets = set()
for w, d, spec, c, a in serve:
    if "--agent-tokens" not in a:
        problems.append("%s: kace serve has no --agent-tokens: an observation's sender is its address, "
                        "which anyone can pose as" % w)
    for name in ("--token-file", "--agent-tokens"):
        if flag(a, name):
            sec = secret_file(w, spec, c, flag(a, name), "kace serve " + name)
            if name == "--token-file" and sec:
                admin_secrets.add(sec)
for w, d, spec, c, a in agent:
    if not flag(a, "--serve-token-file"):
        problems.append("%s: kace agent has no --serve-token-file" % w)
    else:
        secret_file(w, spec, c, flag(a, "--serve-token-file"), "kace agent --serve-token-file")
    for v in spec.get("volumes", []):
        if v.get("secret", {}).get("secretName") in admin_secrets:
            problems.append("%s: the agent mounts kace serve's admin token (Secret %s): give it an agent's token"
                            % (w, v["secret"]["secretName"]))

# Prometheus: the scrape job's token and target, the pod's annotations
with open(scrape_path) as f:
    scrape = yaml.safe_load(f)
for job in scrape.get("scrape_configs", []):
    if not job.get("authorization", {}).get("credentials_file"):
        problems.append("%s: job %s sends no token (authorization.credentials_file)" % (scrape_path, job.get("job_name")))
    for sc in job.get("static_configs", []):
        for t in sc.get("targets", []):
            m = re.match(r"^([^.:]+)\.([^.:]+)\.svc(?:\.cluster\.local)?:(\d+)$", t)
            svc = [s for s in of_kind("Service") if m and s["metadata"]["name"] == m.group(1)
                   and s["metadata"].get("namespace") == m.group(2)]
            if not svc:
                problems.append("%s: target %s is no Service of %s" % (scrape_path, t, deploy))
                continue
            ports = [p for p in svc[0]["spec"].get("ports", []) if str(p["port"]) == m.group(3)]
            for w, d, spec, c, a in serve:
                listen_port = (flag(a, "--listen") or "127.0.0.1:8080").rsplit(":", 1)[1]
                if not ports or str(ports[0].get("targetPort", ports[0]["port"])) != listen_port:
                    problems.append("%s: target %s does not reach kace serve's --listen port %s" % (scrape_path, t, listen_port))
for w, d, spec, c, a in serve:
    ann = d["spec"]["template"]["metadata"].get("annotations", {}) if d["kind"] != "Pod" else d["metadata"].get("annotations", {})
    listen_port = (flag(a, "--listen") or "127.0.0.1:8080").rsplit(":", 1)[1]
    if ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/port") != listen_port:
        problems.append("%s: prometheus.io/port %s is not kace serve's --listen port %s" % (w, ann.get("prometheus.io/port"), listen_port))

# references
accounts = {(d["metadata"]["name"], d["metadata"].get("namespace")) for d in of_kind("ServiceAccount")}
names = {k: {d["metadata"]["name"] for d in of_kind(k)} for k in ("ConfigMap", "PersistentVolumeClaim")}
for w, d, spec in pod_specs():
    sa = spec.get("serviceAccountName")
    if sa and (sa, d["metadata"].get("namespace")) not in accounts:
        problems.append("%s: service account %s is not defined" % (w, sa))
    for v in spec.get("volumes", []):
        if "configMap" in v and v["configMap"]["name"] not in names["ConfigMap"]:
            problems.append("%s: config map %s is not defined" % (w, v["configMap"]["name"]))
        if "persistentVolumeClaim" in v and v["persistentVolumeClaim"]["claimName"] not in names["PersistentVolumeClaim"]:
            problems.append("%s: claim %s is not defined" % (w, v["persistentVolumeClaim"]["claimName"]))
    for c in spec["containers"]:
        mounts = {m["name"] for m in c.get("volumeMounts", [])}
        missing = mounts - {v["name"] for v in spec.get("volumes", [])}
        if missing:
            problems.append("%s: container %s mounts undefined volumes %s" % (w, c["name"], sorted(missing)))

# RBAC: what each kace account may do
roles = {d["metadata"]["name"]: d.get("rules", []) for d in of_kind("ClusterRole")}
def may(account, verb, resource):
    for b in of_kind("ClusterRoleBinding"):
        if not any(s["kind"] == "ServiceAccount" and s["name"] == account for s in b.get("subjects", [])):
            continue
        for r in roles.get(b["roleRef"]["name"], []):
            if resource in r.get("resources", []) and (verb in r["verbs"] or "*" in r["verbs"]):
                return True
    return False
for who, checks in ((serve, [("create", "pods/binding")]), (agent, [("patch", "nodes"), ("list", "pods")])):
    for w, d, spec, c, a in who:
        for verb, resource in checks:
            if not may(spec.get("serviceAccountName", "default"), verb, resource):
                problems.append("%s: account %s may not %s %s" % (w, spec.get("serviceAccountName"), verb, resource))

# GPUs: the device plugin's MPS sharing; the example pod and the fixtures ask for it
def env_of(c):
    return {e["name"]: e.get("value") for e in c.get("env", [])}
plugin_cfgs = []
for cm in of_kind("ConfigMap"):
    for v in cm.get("data", {}).values():
        cfg = yaml.safe_load(v) if "sharing:" in v else None
        if isinstance(cfg, dict) and "sharing" in cfg:
            plugin_cfgs.append((cm["metadata"]["name"], cfg))
gpu_resource = "nvidia.com/gpu"
if len(plugin_cfgs) != 1:
    problems.append("expected one NVIDIA device plugin config (a ConfigMap with sharing:), found %d" % len(plugin_cfgs))
else:
    cm_name, cfg = plugin_cfgs[0]
    mps = cfg["sharing"].get("mps")
    if not mps or "timeSlicing" in cfg["sharing"]:
        problems.append("the device plugin does not share GPUs with MPS (sharing.mps; time-slicing has no memory or thread limits)")
    else:
        res = [r for r in mps.get("resources", []) if r.get("name") == "nvidia.com/gpu"]
        # at least the most pods kace's scheduler puts on one GPU (KACE_SCHED_MAX_GROUP),
        # or the kubelet refuses a pod kace placed
        if len(res) != 1 or not isinstance(res[0].get("replicas"), int) or res[0]["replicas"] < 3:
            problems.append("sharing.mps.resources needs nvidia.com/gpu with replicas >= 3: %s" % mps.get("resources"))
        gpu_resource = "nvidia.com/gpu" + (".shared" if mps.get("renameByDefault") else "")
    # the plugin and the MPS control daemon: same nodes' config and MPS root
    roles = {}
    for w, d, spec in pod_specs():
        for c in spec["containers"]:
            if c.get("command", [None])[0] in ("nvidia-device-plugin", "mps-control-daemon"):
                roles[c["command"][0]] = (w, spec, c)
    for role in ("nvidia-device-plugin", "mps-control-daemon"):
        if role not in roles:
            problems.append("no DaemonSet runs %s" % role)
    roots = set()
    for role, (w, spec, c) in roles.items():
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        conf = os.path.dirname(env_of(c).get("CONFIG_FILE") or "/none/x")
        if vols.get(mounts.get(conf), {}).get("configMap", {}).get("name") != cm_name:
            problems.append("%s: %s does not read the config map %s (CONFIG_FILE)" % (w, role, cm_name))
        root = vols.get(mounts.get("/mps"), {}).get("hostPath", {}).get("path")
        if not root:
            problems.append("%s: %s mounts no MPS root at /mps" % (w, role))
        roots.add(root)
        if role == "nvidia-device-plugin" and env_of(c).get("MPS_ROOT") != root:
            problems.append("%s: MPS_ROOT %s is not the mounted MPS root %s" % (w, env_of(c).get("MPS_ROOT"), root))
    if len(roots) > 1:
        problems.append("the device plugin and the MPS daemon use different MPS roots: %s" % sorted(map(str, roots)))

def check_gpu_pod(where, spec):
    if spec.get("hostIPC"):
        problems.append("%s: hostIPC (the device plugin mounts the MPS pipe and shared memory)" % where)
    for v in spec.get("volumes", []):
        if "hostPath" in v and "mps" in v["hostPath"]["path"]:
            problems.append("%s: mounts the host's MPS folder %s itself" % (where, v["hostPath"]["path"]))
    for c in spec["containers"]:
        lim = c.get("resources", {}).get("limits", {})
        req = c.get("resources", {}).get("requests", {})
        if str(lim.get(gpu_resource)) != "1":
            problems.append("%s: container %s requests no %s: 1 (limits: %s)" % (where, c["name"], gpu_resource, lim))
        if gpu_resource in req and str(req[gpu_resource]) != str(lim.get(gpu_resource)):
            problems.append("%s: container %s: %s requests %s, limits %s" % (where, c["name"], gpu_resource, req[gpu_resource], lim.get(gpu_resource)))
        for e in c.get("env", []):
            if e["name"] in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY"):
                problems.append("%s: container %s sets %s (the device plugin does)" % (where, c["name"], e["name"]))

gpu_pods = [(w, spec) for w, d, spec in pod_specs() if spec.get("schedulerName") == "kace-scheduler"]
if not gpu_pods:
    problems.append("no example pod for the kace scheduler in %s" % deploy)
for path in sorted(glob.glob(os.path.join(fixtures, "*.json"))):
    with open(path) as f:
        doc = json.load(f)
    pod = doc if doc.get("kind") == "Pod" else doc.get("Pod")
    if isinstance(pod, dict) and "spec" in pod:
        gpu_pods.append(("%s (pod %s)" % (os.path.basename(path), pod["metadata"]["name"]), pod["spec"]))
if len(gpu_pods) < 3:
    problems.append("only %d GPU pods found (the example and the fixtures)" % len(gpu_pods))
for w, spec in gpu_pods:
    check_gpu_pod(w, spec)
# NVIDIA_VISIBLE_DEVICES=all: hardened runtimes ignore it unless privileged; only for
# the GPU daemons (privileged) and readers of NVML (utility)
for w, d, spec in pod_specs():
    for c in spec.get("initContainers", []) + spec["containers"]:
        env = env_of(c)
        if env.get("NVIDIA_VISIBLE_DEVICES") == "all" and not c.get("securityContext", {}).get("privileged") \
                and env.get("NVIDIA_DRIVER_CAPABILITIES") != "utility":
            problems.append("%s: container %s takes every GPU (NVIDIA_VISIBLE_DEVICES=all) unprivileged, with %s"
                            % (w, c["name"], env.get("NVIDIA_DRIVER_CAPABILITIES", "the default capabilities")))
print("GPU resource: %s; GPU pods checked: %d" % (gpu_resource, len(gpu_pods)))

for p in problems:
    print("FAIL:", p)
print("%d documents checked, %d problems" % (len(docs), len(problems)))
sys.exit(1 if problems else 0)
EOF

failures=0
python3 "$SCRATCH/check.py" "$KACE" "$HERE/data/k8s/manifest-schema.json" "$DEPLOY" "$HERE/data/k8s" "$SCRAPE" || failures=$((failures + 1))

# The checker fails what is wrong: a misspelt field, a flag kace does not have.
mkdir -p "$SCRATCH/bad1" "$SCRATCH/bad2"
cp "$DEPLOY"/*.yaml "$SCRATCH/bad1/"
sed -i 's/serviceAccountName: kace-agent/serviceAcountName: kace-agent/' "$SCRATCH/bad1/agent.yaml"
python3 "$SCRATCH/check.py" "$KACE" "$HERE/data/k8s/manifest-schema.json" "$SCRATCH/bad1" "$HERE/data/k8s" "$SCRAPE" >"$SCRATCH/bad1.out" 2>&1 &&
    { echo "FAIL: a misspelt serviceAccountName passed" >&2; failures=$((failures + 1)); }
cp "$DEPLOY"/*.yaml "$SCRATCH/bad2/"
sed -i 's/"--assume-seconds"/"--assume-secs"/; s/bindVerb: bind/bindVerb: bound/' "$SCRATCH/bad2/scheduler.yaml"
python3 "$SCRATCH/check.py" "$KACE" "$HERE/data/k8s/manifest-schema.json" "$SCRATCH/bad2" "$HERE/data/k8s" "$SCRAPE" >"$SCRATCH/bad2.out" 2>&1
grep -q 'no option --assume-secs' "$SCRATCH/bad2.out" && grep -q 'no route /k8s/bound' "$SCRATCH/bad2.out" ||
    { echo "FAIL: an unknown flag or verb passed: $(cat "$SCRATCH/bad2.out")" >&2; failures=$((failures + 1)); }

# ... and a deployment that lets anyone reach the extender (the issue's: kace serve on 0.0.0.0:8080 for both)
mkdir -p "$SCRATCH/bad3"
cp "$DEPLOY"/*.yaml "$SCRATCH/bad3/"
sed -i 's/, "--extender-listen", "127.0.0.1:8081",/,/; s#127.0.0.1:8081/k8s#127.0.0.1:8080/k8s#' "$SCRATCH/bad3/scheduler.yaml"
python3 "$SCRATCH/check.py" "$KACE" "$HERE/data/k8s/manifest-schema.json" "$SCRATCH/bad3" "$HERE/data/k8s" "$SCRAPE" >"$SCRATCH/bad3.out" 2>&1
grep -q 'no --extender-listen' "$SCRATCH/bad3.out" ||
    { echo "FAIL: an extender on the token listener passed: $(cat "$SCRATCH/bad3.out")" >&2; failures=$((failures + 1)); }

# ... and GPU pods that do not get their GPU through the device plugin's MPS sharing:
# the example pod without the resource, with NVIDIA_VISIBLE_DEVICES=all, the plugin time-slicing
mkdir -p "$SCRATCH/bad4"
cp "$DEPLOY"/*.yaml "$SCRATCH/bad4/"
sed -i 's#nvidia.com/gpu: 1#example.com/gpu: 1#' "$SCRATCH/bad4/example-pod.yaml"
sed -i 's#^      env:$#      env:\n        - name: NVIDIA_VISIBLE_DEVICES\n          value: all#' "$SCRATCH/bad4/example-pod.yaml"
sed -i 's#^      mps:$#      timeSlicing:#' "$SCRATCH/bad4/nvidia-device-plugin.yaml"
python3 "$SCRATCH/check.py" "$KACE" "$HERE/data/k8s/manifest-schema.json" "$SCRATCH/bad4" "$HERE/data/k8s" "$SCRAPE" >"$SCRATCH/bad4.out" 2>&1
for want in 'does not share GPUs with MPS' 'example-pod.yaml.*requests no nvidia.com/gpu: 1' \
    'example-pod.yaml.*sets NVIDIA_VISIBLE_DEVICES' 'example-pod.yaml.*takes every GPU'; do
    grep -q "$want" "$SCRATCH/bad4.out" ||
        { echo "FAIL: the checker missed '$want': $(cat "$SCRATCH/bad4.out")" >&2; failures=$((failures + 1)); }
done

# ... and tokens given away: the agent with the admin token's Secret, Secrets every user
# may read; kace serve without --agent-tokens, its Secrets root's alone for a non-root
# pod; Prometheus scraping another port without a token
mkdir -p "$SCRATCH/bad5" "$SCRATCH/bad6"
cp "$DEPLOY"/*.yaml "$SCRATCH/bad5/"
sed -i 's/secretName: kace-agent-token$/secretName: kace-token/' "$SCRATCH/bad5/agent.yaml"
sed -i 's/defaultMode: 0440/defaultMode: 0444/' "$SCRATCH/bad5/scheduler.yaml"
python3 "$SCRATCH/check.py" "$KACE" "$HERE/data/k8s/manifest-schema.json" "$SCRATCH/bad5" "$HERE/data/k8s" "$SCRAPE" >"$SCRATCH/bad5.out" 2>&1
for want in 'agent.yaml.*mounts kace serve.s admin token (Secret kace-token)' \
    'scheduler.yaml.*--agent-tokens /etc/kace/agents/agents (Secret kace-agent-tokens) is readable by other users' \
    'scheduler.yaml.*--token-file /etc/kace/token/token (Secret kace-token) is readable by other users'; do
    grep -q "$want" "$SCRATCH/bad5.out" ||
        { echo "FAIL: the checker missed '$want': $(cat "$SCRATCH/bad5.out")" >&2; failures=$((failures + 1)); }
done
cp "$DEPLOY"/*.yaml "$SCRATCH/bad6/"
sed -i 's#"--agent-tokens", "/etc/kace/agents/agents", ##; /fsGroup:/d; s/prometheus.io\/port: "8080"/prometheus.io\/port: "8081"/' \
    "$SCRATCH/bad6/scheduler.yaml"
sed '/credentials_file:/d; s/svc:8080/svc:8081/' "$SCRAPE" >"$SCRATCH/bad6/scrape.yml"
python3 "$SCRATCH/check.py" "$KACE" "$HERE/data/k8s/manifest-schema.json" "$SCRATCH/bad6" "$HERE/data/k8s" \
    "$SCRATCH/bad6/scrape.yml" >"$SCRATCH/bad6.out" 2>&1
for want in 'kace serve has no --agent-tokens' 'token-file /etc/kace/token/token.*without an fsGroup, cannot read it' \
    'job kace sends no token' 'target kace-serve.kube-system.svc:8081 does not reach kace serve.s --listen port 8080' 'prometheus.io/port 8081 is not'; do
    grep -q "$want" "$SCRATCH/bad6.out" ||
        { echo "FAIL: the checker missed '$want': $(cat "$SCRATCH/bad6.out")" >&2; failures=$((failures + 1)); }
done

[ "$failures" -eq 0 ] || exit 1
echo "cli_k8s_manifests: ok"
