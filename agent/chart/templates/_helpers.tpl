{{/* The chart's name. */}}
{{- define "karpenter-agent.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: the prefix of every object. */}}
{{- define "karpenter-agent.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- /* `helm install karpenter` (as upstream's docs) names everything karpenter. */}}
{{- if or (contains $name .Release.Name) (hasPrefix .Release.Name $name) }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "karpenter-agent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "karpenter-agent.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "karpenter-agent.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "karpenter-agent.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kubectl-karpenter
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "karpenter-agent.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "karpenter-agent.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "karpenter-agent.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- /* Images are tagged v<version> (agent/Dockerfile). */}}
{{- printf "%s:%s" .Values.image.repository (default (printf "v%s" .Chart.AppVersion) .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Refuses values the agent could not run with, naming the value. */}}
{{- define "karpenter-agent.validate" -}}
{{- if not (has .Values.provider (list "aws" "gcp" "kwok")) }}
{{- fail (printf "provider must be aws, gcp or kwok, not %q (--set provider=aws)" .Values.provider) }}
{{- end }}
{{- if and (eq .Values.provider "aws") (not .Values.settings.clusterName) }}
{{- fail "settings.clusterName is required with provider aws: the EKS cluster's name (--set settings.clusterName=NAME)" }}
{{- end }}
{{- if eq .Values.provider "gcp" }}
{{- if not .Values.gcp.project }}
{{- fail "gcp.project is required with provider gcp (--set gcp.project=PROJECT)" }}
{{- end }}
{{- if not .Values.settings.clusterName }}
{{- fail "settings.clusterName is required with provider gcp: the GKE cluster's name" }}
{{- end }}
{{- if and (not .Values.gcp.region) (not .Values.gcp.zones) }}
{{- fail "gcp.region (or gcp.zones) is required with provider gcp" }}
{{- end }}
{{- end }}
{{- end }}
