{{/* The release's full name: the release name, with "-plumb" unless it holds it. */}}
{{- define "plumb.fullname" -}}
{{- if contains "plumb" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-plumb" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "plumb.selectorLabels" -}}
app.kubernetes.io/name: plumb
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{- define "plumb.labels" -}}
{{ include "plumb.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "plumb.serviceAccountName" -}}
{{- default (include "plumb.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "plumb.webhookSecretName" -}}
{{- default (printf "%s-webhook" (include "plumb.fullname" .)) .Values.webhook.secret.existingSecret -}}
{{- end -}}

{{- define "plumb.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}
{{- end -}}

{{/* The rules on the kinds plumb manages: rules and extraRules. */}}
{{- define "plumb.managedRules" -}}
{{- with concat .Values.rbac.rules .Values.rbac.extraRules }}
{{- toYaml . }}
{{- end }}
{{- end -}}

{{/* The same kinds and the cluster-scoped ones, read-only (mode none: Observe's informers are plumb's own). */}}
{{- define "plumb.readRules" -}}
{{- range concat .Values.rbac.rules .Values.rbac.extraRules .Values.rbac.clusterRules }}
- apiGroups: {{ toJson .apiGroups }}
  resources: {{ toJson .resources }}
  verbs: ["get", "list", "watch"]
{{- end }}
{{- end -}}

{{/* plumb's own needs in one namespace, or in all (mode cluster and none). */}}
{{- define "plumb.ownRules" -}}
- apiGroups: ["plumb.dev"]
  resources: ["apps"]
  verbs: ["get", "list", "watch", "update", "patch"]
- apiGroups: ["plumb.dev"]
  resources: ["apps/status"]
  verbs: ["get", "update", "patch"]
- apiGroups: ["plumb.dev"]
  resources: ["apps/finalizers"]
  verbs: ["update"]
- apiGroups: ["plumb.dev"]
  resources: ["notifications"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["plumb.dev"]
  resources: ["notifications/status"]
  verbs: ["get", "update", "patch"]
# The Secrets that Apps and Notifications name: each credentials Secret is
# watched alone (a field selector on its name; with get only, plumb would
# read it with a request every tick), the others are read by name.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "list", "watch"]
# Apps act as ServiceAccounts of their own namespace.
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get", "list", "watch", "impersonate"]
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end -}}

{{/* "true" when Apps may place objects only in their own namespace: as set, or by default in mode namespaces (where plumb's Roles span several teams' namespaces). */}}
{{- define "plumb.noCrossNamespace" -}}
{{- if kindIs "bool" .Values.controller.noCrossNamespace -}}
{{- if .Values.controller.noCrossNamespace }}true{{ end -}}
{{- else if eq .Values.rbac.mode "namespaces" -}}
true
{{- end -}}
{{- end -}}

{{/* The name of the cluster-scoped RBAC objects: namespace:fullname, so that installs in two namespaces do not collide (":" is in no namespace or release name). */}}
{{- define "plumb.clusterName" -}}
{{- printf "%s:%s" .Release.Namespace (include "plumb.fullname" .) -}}
{{- end -}}

{{/* The controller's arguments, from the values. */}}
{{- define "plumb.args" -}}
- controller
{{- if gt (int .Values.shards) 0 }}
- --shards=auto
{{- else }}
- --leader-elect=true
{{- end }}
- --leader-election-namespace={{ .Release.Namespace }}
- --leader-election-id={{ include "plumb.fullname" . }}
- --workers={{ .Values.controller.workers }}
- --log-level={{ .Values.controller.logLevel }}
- --log-encoding={{ .Values.controller.logEncoding }}
- --metrics-addr=:8080
- --health-addr=:8081
- --webhook-addr=:9292
- --git-cache-dir=/var/cache/plumb/git
- --max-repository-files={{ int64 .Values.controller.readLimits.maxRepositoryFiles }}
- --max-repository-bytes={{ int64 .Values.controller.readLimits.maxRepositoryBytes }}
- --max-file-bytes={{ int64 .Values.controller.readLimits.maxFileBytes }}
- --max-objects={{ int64 .Values.controller.readLimits.maxObjects }}
- --max-fetch-bytes={{ int64 .Values.controller.readLimits.maxFetchBytes }}
- --render-timeout={{ .Values.controller.renderTimeout }}
- --render-memory-bytes={{ int64 .Values.controller.renderMemoryBytes }}
- --render-cache-bytes={{ int64 .Values.controller.renderCacheBytes }}
- --shutdown-timeout={{ .Values.controller.shutdownTimeout }}
- --kube-api-qps={{ .Values.controller.kubeAPIQPS }}
- --kube-api-burst={{ .Values.controller.kubeAPIBurst }}
- --webhook-max-body-bytes={{ int64 .Values.webhook.maxBodyBytes }}
{{- range .Values.webhook.providers }}
- --webhook-secret-file={{ . }}=/etc/plumb/webhook/{{ . }}
{{- end }}
{{- with .Values.controller.appLabelSelector }}
- --app-label-selector={{ . }}
{{- end }}
{{- with .Values.controller.defaultServiceAccount }}
- --default-service-account={{ . }}
{{- end }}
{{- if include "plumb.noCrossNamespace" . }}
- --no-cross-namespace
{{- end }}
{{- if eq .Values.rbac.mode "namespaces" }}
- --watch-namespaces={{ join "," .Values.rbac.namespaces }}
{{- end }}
{{- with .Values.controller.notificationBlockedCIDRs }}
- --notification-blocked-cidrs={{ join "," . }}
{{- end }}
{{- if not .Values.controller.notificationBlockDefaultCIDRs }}
- --notification-block-default-cidrs=false
{{- end }}
{{- include "plumb.destinationBlockedArgs" . }}
{{- if .Values.controller.allowInsecureRegistries }}
- --allow-insecure-registries
{{- end }}
{{- if .Values.controller.noRemoteClusters }}
- --no-remote-clusters
{{- end }}
- --max-destinations={{ .Values.controller.maxDestinations }}
- --max-destinations-per-namespace={{ .Values.controller.maxDestinationsPerNamespace }}
- --max-destination-kinds={{ .Values.controller.maxDestinationKinds }}
{{- with .Values.controller.extraArgs }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The dashboard's pods: a name of their own, so that no selector of the controller's takes them. */}}
{{- define "plumb.dashboardSelectorLabels" -}}
app.kubernetes.io/name: plumb-dashboard
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{/* The controller's replicas: `shards` when the Apps are spread over them. */}}
{{- define "plumb.replicas" -}}
{{- if gt (int .Values.shards) 0 }}{{ int .Values.shards }}{{ else }}{{ int .Values.replicas }}{{ end -}}
{{- end }}

{{/*
The address ranges destination clusters may not be at, for the controller
and the dashboard's previews alike.
*/}}
{{- define "plumb.destinationBlockedArgs" -}}
{{- with .Values.controller.destinationBlockedCIDRs }}
- --destination-blocked-cidrs={{ join "," . }}
{{- end }}
{{- if not .Values.controller.destinationBlockDefaultCIDRs }}
- --destination-block-default-cidrs=false
{{- end }}
{{- end }}
