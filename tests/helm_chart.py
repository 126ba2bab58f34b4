"""Drives Helm's own library (helm-sdkpy, Helm v4) for tests/it/helm/; runs in the venv tests/run.sh makes.

  helm_chart.py lint CHART VALUES.yaml|default...
      Lints the chart once per values file (`default`: with its own values.yaml alone) and prints one JSON
      object per line: {"values": FILE, "messages": [[severity, path], ...]}. helm-sdkpy's Lint takes
      no values, so each values file is merged into a copy of the chart's values.yaml (a null deletes
      the key, as with `helm -f`). Severities: 1 info, 2 warning, 3 error.

  helm_chart.py values-table CHART
      Prints the Markdown table of the chart's values (key | default | description) from values.yaml's
      helm-docs comments (`# -- ...` above a key, continued by the `#` lines below it): one row per key
      that has such a comment, or that holds no map of its own; a documented map is one row (its whole
      default), and so is a list. docs/deployment.md carries it, and tests/it/helm/notes.rs holds the two equal.

  helm_chart.py render CHART RELEASE NAMESPACE [VALUES.yaml...]
      Installs the chart with Helm's install action (the values files merged in order, as with
      `helm install -f a -f b`) and prints {"manifest": ..., "notes": ...} or {"error": ...}. The
      library exposes no dry run, so the install talks to a loopback stand-in for the Kubernetes
      API: it answers discovery (core, apps, policy, the Prometheus Operator's, Argo Rollouts' and Flagger's
      groups) and accepts
      every object. It checks nothing: what is rendered is Helm's own output, which the test then
      validates.
"""
import asyncio
import http.server
import json
import pathlib
import re
import shutil
import sys
import tempfile
import threading

import helm_sdkpy
import yaml

RESOURCES = {
    "v1": [("configmaps", "ConfigMap"), ("services", "Service"), ("secrets", "Secret"),
           ("serviceaccounts", "ServiceAccount")],
    "apps/v1": [("deployments", "Deployment")],
    "policy/v1": [("poddisruptionbudgets", "PodDisruptionBudget")],
    "networking.k8s.io/v1": [("networkpolicies", "NetworkPolicy")],
    "monitoring.coreos.com/v1": [
        ("servicemonitors", "ServiceMonitor"),
        ("podmonitors", "PodMonitor"),
        ("prometheusrules", "PrometheusRule"),
    ],
    "monitoring.coreos.com/v1alpha1": [("alertmanagerconfigs", "AlertmanagerConfig")],
    "argoproj.io/v1alpha1": [("analysistemplates", "AnalysisTemplate")],
    "flagger.app/v1beta1": [("metrictemplates", "MetricTemplate")],
}


def merge(base, over):
    for k, v in (over or {}).items():
        if v is None:
            base.pop(k, None)
        elif isinstance(v, dict) and isinstance(base.get(k), dict):
            merge(base[k], v)
        else:
            base[k] = v
    return base


def lint(chart, values_files):
    chart = pathlib.Path(chart)
    for vf in values_files:
        with tempfile.TemporaryDirectory() as tmp:
            copy = pathlib.Path(tmp) / chart.name
            shutil.copytree(chart, copy)  # follows the files/ links, as `helm package` does
            if vf != "default":
                values = yaml.safe_load((chart / "values.yaml").read_text())
                merge(values, yaml.safe_load(pathlib.Path(vf).read_text()))
                (copy / "values.yaml").write_text(yaml.safe_dump(values))
            result = asyncio.run(helm_sdkpy.Lint(helm_sdkpy.Configuration()).run(str(copy)))
        messages = [[m["Severity"], m["Path"]] for m in result.get("Messages") or []]
        print(json.dumps({"values": vf, "messages": messages}), flush=True)


class Api(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/version":
            return self.answer(200, {"major": "1", "minor": "30", "gitVersion": "v1.30.0"})
        if path == "/api":
            return self.answer(200, {"kind": "APIVersions", "versions": ["v1"]})
        if path == "/apis":
            groups = {}
            for gv in RESOURCES:
                if "/" in gv:
                    groups.setdefault(gv.split("/")[0], []).append(
                        {"groupVersion": gv, "version": gv.split("/")[1]}
                    )
            listed = [{"name": g, "versions": v, "preferredVersion": v[0]} for g, v in groups.items()]
            return self.answer(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": listed})
        m = re.fullmatch(r"/api/v1|/apis/([^/]+/[^/]+)", path)
        if m:
            gv = m.group(1) or "v1"
            resources = [
                {"name": n, "singularName": k.lower(), "namespaced": True, "kind": k,
                 "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}
                for n, k in RESOURCES[gv]
            ]
            return self.answer(200, {"kind": "APIResourceList", "apiVersion": "v1",
                                     "groupVersion": gv, "resources": resources})
        if path.endswith("/secrets"):  # Helm's release records: none yet
            return self.answer(200, {"kind": "SecretList", "apiVersion": "v1", "items": []})
        return self.answer(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                 "reason": "NotFound", "code": 404})

    def accept(self, code):
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.headers.get("Content-Type", "").startswith("application/json"):
            return self.answer(code, json.loads(raw))
        # Helm's release record, a Secret the typed client sends as protobuf.
        return self.answer(code, {"kind": "Secret", "apiVersion": "v1", "metadata": {"name": "release"}})

    def do_POST(self):
        self.accept(201)

    def do_PUT(self):
        self.accept(200)

    def do_PATCH(self):
        self.accept(200)


def render(chart, release, namespace, values_files):
    values = {}
    for vf in values_files:
        merge(values, yaml.safe_load(pathlib.Path(vf).read_text()))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "stand-in",
        "clusters": [{"name": "stand-in", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "stand-in", "user": {"token": "stand-in"}}],
        "contexts": [{"name": "stand-in", "context": {"cluster": "stand-in", "user": "stand-in"}}],
    })
    config = helm_sdkpy.Configuration(namespace=namespace, kubeconfig=kubeconfig)
    try:
        result = asyncio.run(helm_sdkpy.Install(config).run(
            release, chart, values=values or None, wait=False, timeout=60))
    except helm_sdkpy.HelmError as e:
        print(json.dumps({"error": str(e)}))
        return
    finally:
        server.shutdown()
    print(json.dumps({"manifest": result["manifest"], "notes": result["info"].get("notes", "")}))


def values_table(chart):
    text = (pathlib.Path(chart) / "values.yaml").read_text()
    values = yaml.safe_load(text)
    rows, stack, comment, skip_below = [], [], [], None
    for line in text.splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if skip_below is not None:
            if not stripped or indent > skip_below:
                continue
            skip_below = None
        if stripped.startswith("#"):
            comment.append(stripped)
            continue
        m = re.fullmatch(r"([A-Za-z0-9_]+):.*", stripped)
        if not m:
            comment = []
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = [k for _, k in stack] + [m.group(1)]
        doc = []
        for i, c in enumerate(comment):
            if c.startswith("# --"):
                doc = [c[4:].strip()] + [x.lstrip("#").strip() for x in comment[i + 1:]]
                break
        comment = []
        value = values
        for k in path:
            value = value[k]
        if doc or not isinstance(value, dict) or not value:
            default = json.dumps(value, separators=(", ", ": "))
            description = " ".join(doc).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
            rows.append(f"| `{'.'.join(path)}` | `{default}` | {description} |")
            skip_below = indent
        else:
            stack.append((indent, m.group(1)))
    print("| key | default | description |\n|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "lint":
        lint(args[0], args[1:])
    elif command == "values-table":
        values_table(args[0])
    elif command == "render":
        render(args[0], args[1], args[2], args[3:])
    else:
        sys.exit(f"unknown command {command}")
