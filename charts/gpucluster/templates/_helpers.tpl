{{/* Names and labels. */}}

{{- define "gpucluster.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* release-chart, or the release name alone when it already names the chart. */}}
{{- define "gpucluster.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpucluster.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The standard labels of every object of the release. */}}
{{- define "gpucluster.labels" -}}
helm.sh/chart: {{ include "gpucluster.chart" . }}
{{ include "gpucluster.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpucluster
{{- with .Values.operator.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "gpucluster.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpucluster.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
Labels of the webhook configurations. With self-managed certificates the operator injects the
caBundle into configurations of our names that carry gpucluster.nvidia.com/inject-ca-bundle
(Helm sets app.kubernetes.io/managed-by=Helm on everything it installs, so that label cannot
mark them).
*/}}
{{- define "gpucluster.webhookLabels" -}}
helm.sh/chart: {{ include "gpucluster.chart" . }}
app.kubernetes.io/name: gpucluster
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpucluster
{{- if eq .Values.webhook.certificates.mode "self-managed" }}
gpucluster.nvidia.com/inject-ca-bundle: "true"
{{- end }}
{{- end -}}

{{- define "gpucluster.serviceAccountName" -}}
{{ include "gpucluster.fullname" . }}
{{- end -}}

{{- define "gpucluster.webhookService" -}}
{{ include "gpucluster.fullname" . | trunc 55 | trimSuffix "-" }}-webhook
{{- end -}}

{{/* The Secret holding the webhook's certificates. */}}
{{- define "gpucluster.certSecret" -}}
{{- if eq .Values.webhook.certificates.mode "secret" -}}
{{ .Values.webhook.certificates.secret.name }}
{{- else -}}
{{ include "gpucluster.fullname" . | trunc 50 | trimSuffix "-" }}-webhook-certs
{{- end -}}
{{- end -}}

{{- define "gpucluster.certificateName" -}}
{{ include "gpucluster.fullname" . | trunc 50 | trimSuffix "-" }}-webhook
{{- end -}}

{{/* Images. */}}
{{- define "gpucluster.image" -}}
{{ include "gpucluster.operandImage" (dict "repository" .Values.operator.repository "image" .Values.operator.image "version" (.Values.operator.version | default .Chart.AppVersion)) }}
{{- end -}}

{{/* repository/image:version of an operand's values, "" when incomplete; a sha256: version is a digest. */}}
{{- define "gpucluster.operandImage" -}}
{{- if and .repository .image .version -}}
{{- if hasPrefix "sha256:" (toString .version) -}}
{{ .repository }}/{{ .image }}@{{ .version }}
{{- else -}}
{{ .repository }}/{{ .image }}:{{ .version }}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The operator's environment: the image variables, each unless operator.env sets it, then operator.env.
*/}}
{{- define "gpucluster.operatorEnv" -}}
{{- $user := dict -}}
{{- range .Values.operator.env -}}
{{- $_ := set $user .name true -}}
{{- end -}}
{{- $images := dict
  "DRA_DRIVER_IMAGE" (include "gpucluster.operandImage" .Values.gpuCluster.draDriver)
  "DCGM_EXPORTER_IMAGE" (include "gpucluster.operandImage" .Values.dcgmExporter)
  "DCGM_IMAGE" (include "gpucluster.operandImage" .Values.dcgm)
  "VALIDATOR_IMAGE" (include "gpucluster.operandImage" .Values.validator) -}}
{{- range $name := list "DRA_DRIVER_IMAGE" "DCGM_EXPORTER_IMAGE" "DCGM_IMAGE" "VALIDATOR_IMAGE" }}
{{- $value := get $images $name }}
{{- if and $value (not (hasKey $user $name)) }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end }}
{{- with .Values.operator.env }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
A map without its empty values ("", null, [], {}), recursively; false and 0 are kept.
Used to build the GPUCluster spec from values, where an empty value means "not set".
*/}}
{{- define "gpucluster.prune" -}}
{{- $out := dict -}}
{{- range $key, $value := . -}}
{{- if kindIs "map" $value -}}
{{- $inner := include "gpucluster.prune" $value | fromYaml -}}
{{- if $inner -}}
{{- $_ := set $out $key $inner -}}
{{- end -}}
{{- else if or (kindIs "bool" $value) (kindIs "float64" $value) (kindIs "int" $value) (kindIs "int64" $value) -}}
{{- $_ := set $out $key $value -}}
{{- else if not (empty $value) -}}
{{- $_ := set $out $key $value -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* The spec of the default GPUCluster, from the values of the docs' Helm reference. */}}
{{- define "gpucluster.gpuClusterSpec" -}}
{{- $spec := dict
  "draDriver" .Values.gpuCluster.draDriver
  "dcgmExporter" .Values.dcgmExporter
  "dcgm" .Values.dcgm
  "hostPaths" .Values.hostPaths
  "daemonsets" .Values.daemonsets -}}
{{- include "gpucluster.prune" $spec -}}
{{- end -}}

{{/* The failure policy of one webhook: webhook.failurePolicy[name], else the default given. */}}
{{- define "gpucluster.failurePolicy" -}}
{{- $root := index . 0 -}}
{{- index $root.Values.webhook.failurePolicy (index . 1) | default (index . 2) -}}
{{- end -}}

{{/* clientConfig of our webhooks: the Service, and the caBundle in secret mode or kept from the cluster. */}}
{{- define "gpucluster.clientConfig" -}}
{{- $root := index . 0 -}}
{{- $path := index . 1 -}}
{{- $kind := index . 2 -}}
{{- $name := index . 3 -}}
service:
  name: {{ include "gpucluster.webhookService" $root }}
  namespace: {{ $root.Release.Namespace }}
  path: /{{ $path }}
  port: 443
{{- $bundle := "" -}}
{{- if eq $root.Values.webhook.certificates.mode "secret" -}}
{{- $bundle = $root.Values.webhook.certificates.secret.caBundle -}}
{{- else if eq $root.Values.webhook.certificates.mode "self-managed" -}}
{{- /* Keep the injected bundle across upgrades so the webhook is trusted without a gap. */ -}}
{{- $live := lookup "admissionregistration.k8s.io/v1" $kind "" $name -}}
{{- range (($live | default dict).webhooks | default list) -}}
{{- if and (not $bundle) .clientConfig .clientConfig.caBundle -}}
{{- $bundle = .clientConfig.caBundle -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $bundle }}
caBundle: {{ $bundle | quote }}
{{- end -}}
{{- end -}}

{{/* Pod security: non-root, read-only root filesystem, no privileges. */}}
{{- define "gpucluster.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* Annotations of the webhook configurations: cert-manager's CA injection, in that mode. */}}
{{- define "gpucluster.webhookAnnotations" -}}
{{- if eq .Values.webhook.certificates.mode "cert-manager" -}}
annotations:
  cert-manager.io/inject-ca-from: {{ printf "%s/%s" .Release.Namespace (include "gpucluster.certificateName" .) | quote }}
{{- end -}}
{{- end -}}

{{/* Namespaces whose objects never go through the webhook: kube-system and the operator's (sorted). */}}
{{- define "gpucluster.excludedNamespaces" -}}
{{- range (list "kube-system" .Release.Namespace | uniq | sortAlpha) }}
- {{ . | quote }}
{{- end -}}
{{- end -}}

{{/* The ConfigMap of the default objects, and the identity of the chart's hook Jobs. */}}
{{- define "gpucluster.defaultsName" -}}
{{ include "gpucluster.fullname" . | trunc 54 | trimSuffix "-" }}-defaults
{{- end -}}

{{- define "gpucluster.hooksName" -}}
{{ include "gpucluster.fullname" . | trunc 57 | trimSuffix "-" }}-hooks
{{- end -}}

{{- define "gpucluster.handoverName" -}}
{{ include "gpucluster.fullname" . | trunc 54 | trimSuffix "-" }}-handover
{{- end -}}

{{/* The default GPUCluster, applied by the install/upgrade hook. */}}
{{- define "gpucluster.defaultGPUCluster" -}}
apiVersion: nvidia.com/v1alpha1
kind: GPUCluster
metadata:
  name: gpu-cluster
  labels:
    {{- include "gpucluster.labels" . | nindent 4 }}
    app.kubernetes.io/component: gpucluster
spec:
  {{- include "gpucluster.gpuClusterSpec" . | nindent 2 }}
{{- end -}}

{{/*
The operator-managed driver. GPUCluster does not manage the driver; automatic driver upgrades
are not supported for DRA nodes yet, so they are off (and the webhook refuses to turn them on).
With driver.nvidiaDriverCRD.nodeSelector the NVIDIADriver serves the selected nodes only and is
not the default one: the NVIDIADriver API refuses a default NVIDIADriver with a nodeSelector.
*/}}
{{- define "gpucluster.defaultNVIDIADriver" -}}
apiVersion: nvidia.com/v1alpha1
kind: NVIDIADriver
metadata:
  name: {{ .Values.driver.nvidiaDriverCRD.name }}
  labels:
    {{- include "gpucluster.labels" . | nindent 4 }}
    app.kubernetes.io/component: driver
spec:
  {{- with .Values.driver.nvidiaDriverCRD.nodeSelector }}
  default: false
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- else }}
  # Serves every GPU node no other NVIDIADriver selects.
  default: true
  {{- end }}
  driverType: {{ .Values.driver.nvidiaDriverCRD.driverType }}
  repository: {{ .Values.driver.repository }}
  image: {{ .Values.driver.image }}
  version: {{ .Values.driver.version | quote }}
  imagePullPolicy: {{ .Values.driver.imagePullPolicy }}
  {{- with .Values.driver.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  kernelModuleType: {{ .Values.driver.kernelModuleType }}
  usePrecompiled: {{ .Values.driver.usePrecompiled }}
  {{- with .Values.daemonsets.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.daemonsets.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  upgradePolicy:
    autoUpgrade: false
{{- end -}}

{{/* Pod settings of the chart's hook Jobs: their identity, no restarts in place, the operator's
placement and pull secrets. */}}
{{- define "gpucluster.hookPodSettings" -}}
serviceAccountName: {{ include "gpucluster.hooksName" . }}
{{ include "gpucluster.hookPodCommon" . }}
{{- end -}}

{{/* A hook pod's settings but its ServiceAccount. */}}
{{- define "gpucluster.hookPodCommon" -}}
restartPolicy: Never
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  seccompProfile:
    type: RuntimeDefault
{{- with .Values.operator.imagePullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
{{- with .Values.operator.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.operator.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Fail unless a caBundle value (list: the value, its name, what a bad one breaks) is base64 of a
PEM certificate. */}}
{{- define "gpucluster.requirePEM" -}}
{{- $value := index . 0 }}
{{- if not (contains "-----BEGIN CERTIFICATE-----" (b64dec $value)) }}
{{- fail (printf "%s is not a base64-encoded PEM certificate (-----BEGIN CERTIFICATE-----): %s (base64 -w0 ca.crt gives the value)" (index . 1) (index . 2)) }}
{{- end }}
{{- end -}}
