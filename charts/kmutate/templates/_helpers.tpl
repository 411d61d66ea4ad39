{{/* The chart's name, or nameOverride. */}}
{{- define "kmutate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The objects' name: the release name when it holds the chart's name. */}}
{{- define "kmutate.fullname" -}}
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

{{/* Labels of every object. */}}
{{- define "kmutate.labels" -}}
app.kubernetes.io/name: {{ include "kmutate.name" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The labels that select the Pods. */}}
{{- define "kmutate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kmutate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The Secret of the serving certificate. */}}
{{- define "kmutate.tlsSecret" -}}
{{- if eq .Values.certificate.source "secret" }}
{{- required "certificate.existingSecret is required with certificate.source secret" .Values.certificate.existingSecret }}
{{- else }}
{{- printf "%s-tls" (include "kmutate.fullname" .) }}
{{- end }}
{{- end }}

{{/* Whether policies are read from mounted files. */}}
{{- define "kmutate.readsFiles" -}}
{{- if has .Values.policySource (list "files" "both") }}true{{ end }}
{{- end }}

{{/* The ConfigMaps of policies and bindings. */}}
{{- define "kmutate.policiesConfigMap" -}}
{{- default (printf "%s-policies" (include "kmutate.fullname" .)) .Values.policies.existingConfigMap }}
{{- end }}
{{- define "kmutate.bindingsConfigMap" -}}
{{- default (printf "%s-bindings" (include "kmutate.fullname" .)) .Values.policies.existingBindingsConfigMap }}
{{- end }}

{{/*
The generated CA and serving certificate (certificate.source generate),
made once per render and kept from the installed Secret on upgrade.
*/}}
{{- define "kmutate.generatedCert" -}}
{{- $secretName := include "kmutate.tlsSecret" . }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace $secretName }}
{{- if and $existing (index $existing.data "ca.crt") }}
{{- dict "ca" (index $existing.data "ca.crt") "crt" (index $existing.data "tls.crt") "key" (index $existing.data "tls.key") | toJson }}
{{- else }}
{{- $fullname := include "kmutate.fullname" . }}
{{- $names := list (printf "%s.%s.svc" $fullname .Release.Namespace) (printf "%s.%s.svc.cluster.local" $fullname .Release.Namespace) }}
{{- $ca := genCA (printf "%s-ca" $fullname) 3650 }}
{{- $cert := genSignedCert (printf "%s.%s.svc" $fullname .Release.Namespace) nil $names 825 $ca }}
{{- dict "ca" ($ca.Cert | b64enc) "crt" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc) | toJson }}
{{- end }}
{{- end }}

{{/* clientConfig.caBundle, or the cert-manager annotation, of a webhook. */}}
{{- define "kmutate.caAnnotations" -}}
{{- if eq .Values.certificate.source "cert-manager" }}
cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/{{ include "kmutate.fullname" . }}-serving
{{- end }}
{{- end }}
