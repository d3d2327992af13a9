{{/* Chart name, overridable. */}}
{{- define "moldau.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the operator's objects: <release>-moldau, or the release name when it already contains the chart name. */}}
{{- define "moldau.fullname" -}}
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

{{- define "moldau.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object of the chart. */}}
{{- define "moldau.labels" -}}
helm.sh/chart: {{ include "moldau.chart" . }}
{{ include "moldau.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: moldau
{{- end }}

{{/* Selector labels of the operator pods. */}}
{{- define "moldau.selectorLabels" -}}
app.kubernetes.io/name: moldau-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "moldau.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "moldau.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator image reference. */}}
{{- define "moldau.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
RBAC rules of the operator for the namespaces it manages. Least privilege,
from what the operator really does (operator/src):
- KafkaClusters/KafkaTopics: watch, finalizers (patch), status (patch);
  finalizers subresource for ownerReferences with blockOwnerDeletion;
- children applied server-side (create + patch), the ones it watches also
  get/list/watch; broker pods deleted one at a time by the rolling restart;
- what the brokers' Role (`<cluster>-broker`) grants: the controller Lease
  (get/update/patch, create), metadatashards (every verb), core and
  events.k8s.io Events (create/patch). RBAC lets the operator create that
  Role only if it holds the same rights; it also reads metadatashards (the
  brokers' cluster record) for KafkaCluster status, and uses the Events
  itself (kube-runtime Recorder: create + patch).
*/}}
{{- define "moldau.operatorRules" -}}
- apiGroups: [moldau.io]
  resources: [kafkaclusters, kafkatopics, kafkarebalances]
  verbs: [get, list, watch, patch, update]
- apiGroups: [moldau.io]
  resources: [kafkaclusters/status, kafkatopics/status, kafkarebalances/status]
  verbs: [get, patch, update]
# The KafkaRebalance a scale runs is created (server-side apply) and
# deleted by the operator.
- apiGroups: [moldau.io]
  resources: [kafkarebalances]
  verbs: [create, delete]
- apiGroups: [moldau.io]
  resources: [kafkaclusters/finalizers, kafkatopics/finalizers]
  verbs: [update]
# policy resources: KafkaQuota, KafkaRetentionPolicy (and their status and finalizers)
- apiGroups: [moldau.io]
  resources: [kafkaquotas, kafkaretentionpolicies]
  verbs: [get, list, watch, patch, update]
- apiGroups: [moldau.io]
  resources: [kafkaquotas/status, kafkaquotas/finalizers, kafkaretentionpolicies/status, kafkaretentionpolicies/finalizers]
  verbs: [get, patch, update]
# KafkaUser (and its status and finalizer), and the user Secrets it writes
# (server-side apply; removed by garbage collection through their owner
# reference) and the password Secrets it reads
- apiGroups: [moldau.io]
  resources: [kafkausers]
  verbs: [get, list, watch, patch, update]
- apiGroups: [moldau.io]
  resources: [kafkausers/status, kafkausers/finalizers]
  verbs: [get, patch, update]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, watch, create, patch]
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [get, list, watch, create, patch]
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create, patch]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, delete]
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get, create, patch]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, create, patch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, create, patch]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, patch]
# The brokers' Role (per KafkaCluster) grants the verbs below; RBAC lets the
# operator grant only what it holds itself. It reads the brokers' cluster
# record (metadatashards) for KafkaCluster status.
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update, patch]
- apiGroups: [moldau.io]
  resources: [metadatashards]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end }}
