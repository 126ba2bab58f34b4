{{/* The chart's name, for app.kubernetes.io/name. */}}
{{- define "ragwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of every object: the release name, with the chart name appended unless the release
name already holds it (release "ragwatch" gives "ragwatch", "payments" gives "payments-ragwatch").
*/}}
{{- define "ragwatch.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* What selects this release's pods, and only them: the name and the instance. */}}
{{- define "ragwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ragwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "ragwatch.labels" -}}
{{ include "ragwatch.selectorLabels" . }}
app.kubernetes.io/part-of: ragwatch
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of the Prometheus Operator's objects: the above and the `release` its Prometheus selects. */}}
{{- define "ragwatch.operatorLabels" -}}
{{ include "ragwatch.labels" . }}
{{- with .Values.prometheusRelease }}
release: {{ . | quote }}
{{- end }}
{{- end }}

{{/* The ConfigMap holding ragwatch.toml. */}}
{{- define "ragwatch.configMapName" -}}
{{- default (printf "%s-config" (include "ragwatch.fullname" .)) .Values.config.existingConfigMap }}
{{- end }}

{{/* The config the chart ships: the inline one, or the kustomize base's. */}}
{{- define "ragwatch.config" -}}
{{- if .Values.config.toml }}
{{- .Values.config.toml }}
{{- else }}
{{- .Files.Get "files/ragwatch.toml" }}
{{- end }}
{{- end }}

{{/* The default runbook base, as written in the rules and the dashboard the chart reads. */}}
{{- define "ragwatch.shippedRunbookBase" -}}
https://github.com/ragwatch/ragwatch/blob/main/docs/runbook.md
{{- end }}

{{/* The `job` label Prometheus gives this release's metrics: the Service's name through the
ServiceMonitor, <namespace>/<name> through the PodMonitor; rolloutGates.job when set. */}}
{{- define "ragwatch.scrapeJob" -}}
{{- if .Values.rolloutGates.job }}
{{- .Values.rolloutGates.job }}
{{- else if .Values.podMonitor.enabled }}
{{- printf "%s/%s" .Release.Namespace (include "ragwatch.fullname" .) }}
{{- else }}
{{- include "ragwatch.fullname" . }}
{{- end }}
{{- end }}

{{/* The full name with a suffix ("-otlp", "-peers"), within the 63 characters of a Service name:
the full name is cut first, so a long release name keeps its suffix. Call with (list . "-otlp"). */}}
{{- define "ragwatch.suffixedName" -}}
{{- $ctx := index . 0 }}
{{- $suffix := index . 1 }}
{{- printf "%s%s" (include "ragwatch.fullname" $ctx | trunc (int (sub 63 (len $suffix))) | trimSuffix "-") $suffix }}
{{- end }}

{{/* The pods' ServiceAccount: serviceAccount.name, else the full name when the chart creates it,
else the namespace's "default". */}}
{{- define "ragwatch.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ragwatch.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image: <repository>@<digest> when image.digest is set, else <repository>:<tag>. */}}
{{- define "ragwatch.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* Whether the chart ships its own config (no config.toml, no config.existingConfigMap). */}}
{{- define "ragwatch.defaultConfig" -}}
{{- if not (or .Values.config.toml .Values.config.existingConfigMap) }}true{{ end }}
{{- end }}

{{/* The consumer group set in the environment: kafka.groupId, or the full name with the chart's
own config; empty (none set) with a config of the user's. */}}
{{- define "ragwatch.kafkaGroup" -}}
{{- if .Values.kafka.groupId }}
{{- .Values.kafka.groupId }}
{{- else if include "ragwatch.defaultConfig" . }}
{{- include "ragwatch.fullname" . }}
{{- end }}
{{- end }}
