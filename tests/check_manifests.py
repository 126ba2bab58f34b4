# Reads rendered manifests (kustomize's or the Helm chart's) on stdin; prints what tests/it/deploy/ and
# tests/it/helm/ assert on. The ragwatch container is checked against the Kubernetes restricted
# profile on its own: the pod's settings never count. argv[1], if given, is the config a ConfigMap
# that is not rendered (the user's own) holds.
import hashlib, json, re, sys, tomllib, yaml
docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
problems = []
def bytes_of(q):
    m = re.fullmatch(r'(\d+)(Ki|Mi|Gi|K|M|G)?', str(q))
    mult = {None: 1, 'Ki': 1024, 'Mi': 1024**2, 'Gi': 1024**3, 'K': 1000, 'M': 1000**2, 'G': 1000**3}
    return int(m.group(1)) * mult[m.group(2)]
configmaps = {d['metadata']['name']: d for d in docs if d['kind'] == 'ConfigMap'}
workloads = []
for d in docs:
    if d['kind'] != 'Deployment':
        continue
    spec = d['spec']['template']['spec']
    rw = [c for c in spec.get('containers', []) + spec.get('initContainers', []) if c['name'] == 'ragwatch']
    if len(rw) != 1: problems.append('one ragwatch container'); continue
    c = rw[0]
    sc = c.get('securityContext', {})
    if sc.get('runAsNonRoot') is not True: problems.append('container runAsNonRoot')
    if sc.get('runAsUser', 1) == 0: problems.append('container runAsUser 0')
    if sc.get('seccompProfile', {}).get('type') != 'RuntimeDefault': problems.append('container seccomp')
    if sc.get('allowPrivilegeEscalation') is not False: problems.append('privilege escalation')
    if sc.get('privileged'): problems.append('privileged')
    if sc.get('readOnlyRootFilesystem') is not True: problems.append('read-only root')
    if sc.get('capabilities', {}).get('drop') != ['ALL']: problems.append('capabilities drop')
    if sc.get('capabilities', {}).get('add'): problems.append('capabilities add')
    if any('hostPort' in p for p in c.get('ports', [])): problems.append('hostPort')
    if c.get('livenessProbe', {}).get('httpGet', {}).get('path') != '/livez': problems.append('livenessProbe')
    others = [x for x in spec.get('containers', []) if x['name'] != 'ragwatch']
    if others:
        # A sidecar: the pod's readiness is the application's, its first container stays first.
        if 'readinessProbe' in c: problems.append('a readiness probe on the sidecar')
        if spec['containers'][0]['name'] == 'ragwatch': problems.append('ragwatch is the first container')
        default = d['spec']['template']['metadata'].get('annotations', {}).get('kubectl.kubernetes.io/default-container')
        if default != spec['containers'][0]['name']: problems.append(f'default-container {default}')
    elif c.get('readinessProbe', {}).get('httpGet', {}).get('path') != '/readyz': problems.append('readinessProbe')
    if spec.get('terminationGracePeriodSeconds', 30) <= 20: problems.append('grace period')
    if 'initContainers' in spec and c in spec['initContainers'] and c.get('restartPolicy') != 'Always':
        problems.append('native sidecar restartPolicy')
    mounts = {m['name']: m['mountPath'] for m in c.get('volumeMounts', [])}
    volumes = {v['name']: v for v in spec.get('volumes', []) if v['name'] in mounts}
    if '/tmp' not in mounts.values(): problems.append('tmp emptyDir')
    for name, v in volumes.items():
        if not ({'configMap', 'secret', 'emptyDir'} & v.keys()): problems.append('volume type ' + name)
    config_volumes = [v for v in volumes.values() if 'configMap' in v and mounts[v['name']] == '/etc/ragwatch']
    if len(config_volumes) != 1: problems.append('config volume'); continue
    cm_name = config_volumes[0]['configMap']['name']
    annotations = d['spec']['template']['metadata'].get('annotations') or {}
    if cm_name in configmaps:
        text = configmaps[cm_name]['data']['ragwatch.toml']
        # A config change rolls the pods: kustomize's generator puts the hash in the name, the Helm
        # chart puts it in the pod template.
        checksum = hashlib.sha256(text.encode()).hexdigest()
        if not cm_name.startswith('ragwatch-config-') and annotations.get('checksum/config') != checksum:
            problems.append('config from a hash-named ConfigMap or with its checksum on the pods: ' + cm_name); continue
    elif len(sys.argv) > 1:
        # A ConfigMap of the user's (the chart's config.existingConfigMap), holding this file.
        text = open(sys.argv[1]).read()
    else:
        problems.append('config ConfigMap not rendered: ' + cm_name); continue
    config = tomllib.loads(text)
    if config.get('log', {}).get('format') != 'json': problems.append('json logs')
    llm = config.get('llm', {})
    cap = llm.get('records_max_bytes', 64 << 20) * (llm.get('records_keep_files', 3) + 1)
    records_dir = llm['records_path'].rsplit('/', 1)[0]
    records = [v for v in volumes.values() if mounts[v['name']] == records_dir]
    if len(records) != 1 or 'emptyDir' not in records[0]: problems.append('records emptyDir'); continue
    limit = bytes_of(records[0]['emptyDir'].get('sizeLimit', 0))
    if limit <= cap: problems.append(f'records emptyDir {limit} <= records cap {cap}')
    workloads.append({'name': d['metadata']['name'], 'labels': d['spec']['template']['metadata'].get('labels', {}),
                      'pod_security_context': spec.get('securityContext'),
                      'containers': [x['name'] for x in spec.get('containers', [])],
                      'grace': spec.get('terminationGracePeriodSeconds'),
                      'selector': d['spec']['selector'],
                      'volumes': [v['name'] for v in spec.get('volumes', [])],
                      'env': {e['name']: e['value'] for e in c.get('env', []) if 'value' in e},
                      'ports': [p['containerPort'] for p in c.get('ports', [])],
                      'config': text})
dashboards = [d for d in docs if d['kind'] == 'ConfigMap' and any(k.endswith('.json') for k in d.get('data', {}))]
for dash in dashboards:
    if dash['metadata'].get('labels', {}).get('grafana_dashboard') != '1': problems.append('dashboard configmap label')
json.dump({
    'kinds': sorted(d['kind'] for d in docs),
    'problems': problems,
    'workloads': workloads,
    'secrets': [d['metadata']['name'] for d in docs if d['kind'] == 'Secret'],
    'release': {d['kind']: d['metadata'].get('labels', {}).get('release') for d in docs
                if d['apiVersion'].startswith('monitoring.coreos.com/')},
    'pdbs': [d['spec'] for d in docs if d['kind'] == 'PodDisruptionBudget'],
    'dashboards': [json.loads(v)['uid'] for d in dashboards for k, v in d['data'].items() if k.endswith('.json')],
}, sys.stdout)
