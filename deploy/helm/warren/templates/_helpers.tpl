{{/* Names, labels and the Secrets' values shared by the templates. */}}

{{- define "warren.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* "<release>-warren", or the release name alone when it has "warren" in it already. */}}
{{- define "warren.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "warren.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "warren.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: include "warren.selector" (list . "api"). */}}
{{- define "warren.selector" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ include "warren.name" $ }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "warren.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "warren.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- include "warren.fullname" . -}}
{{- else -}}
{{- required "serviceAccount.name is needed when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "warren.tokensSecretName" -}}
{{- default (printf "%s-tokens" (include "warren.fullname" .)) .Values.tokens.existingSecret -}}
{{- end -}}

{{/* The Secret holding the database URL: the chart's own when it makes one
(database.url or postgres.enabled), else database.existingSecret, else the
one the operator is told to create: "<fullname>-database". */}}
{{- define "warren.databaseSecretName" -}}
{{- if or .Values.database.url .Values.postgres.enabled -}}
{{- printf "%s-database" (include "warren.fullname" .) -}}
{{- else -}}
{{- default (printf "%s-database" (include "warren.fullname" .)) .Values.database.existingSecret -}}
{{- end -}}
{{- end -}}

{{- define "warren.databaseSecretKey" -}}
{{- if or .Values.database.url .Values.postgres.enabled -}}url{{- else -}}{{ .Values.database.existingSecretKey }}{{- end -}}
{{- end -}}

{{/* keptSecretValue: the base64 value of a key of a Secret as given in the
values, else as the cluster has it (helm install and upgrade can look it up;
helm template cannot), else a new random one. Call with
(list $ secretName key givenValue length). */}}
{{- define "warren.keptSecretValue" -}}
{{- $ := index . 0 -}}
{{- $name := index . 1 -}}
{{- $key := index . 2 -}}
{{- $given := index . 3 -}}
{{- $length := index . 4 -}}
{{- if $given -}}
{{- $given | b64enc -}}
{{- else -}}
{{- $existing := lookup "v1" "Secret" $.Release.Namespace $name -}}
{{- if and $existing $existing.data (hasKey $existing.data $key) -}}
{{- index $existing.data $key -}}
{{- else -}}
{{- randAlphaNum $length | b64enc -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "warren.postgresHost" -}}
{{- printf "%s-postgres" (include "warren.fullname" .) -}}
{{- end -}}

{{- define "warren.apiURL" -}}
{{- if .Values.node.apiURL -}}
{{- .Values.node.apiURL -}}
{{- else -}}
{{- printf "%s://%s-api.%s.svc:%v" (ternary "https" "http" .Values.api.tls.enabled) (include "warren.fullname" .) .Release.Namespace .Values.api.service.port -}}
{{- end -}}
{{- end -}}

{{/* A node's names: include "warren.nodeName" (list $ node) is its
DaemonSet's (and the prefix of its Secrets'), "<fullname>-node-<name>". */}}
{{- define "warren.nodeName" -}}
{{- $ := index . 0 -}}
{{- $n := index . 1 -}}
{{- if not (regexMatch "^[a-z0-9]([a-z0-9.-]{0,40}[a-z0-9])?$" (required "node.nodes[].name is required" $n.name)) -}}
{{- fail (printf "node.nodes[].name %q: lowercase letters, digits, '.' and '-', at most 42 (it names the node's objects)" $n.name) -}}
{{- end -}}
{{- printf "%s-node-%s" (include "warren.fullname" $) $n.name -}}
{{- end -}}

{{- define "warren.nodeTokenSecret" -}}
{{- $n := index . 1 -}}
{{- default (include "warren.nodeName" .) $n.tokenSecret -}}
{{- end -}}

{{- define "warren.nodeTLSSecret" -}}
{{- $n := index . 1 -}}
{{- default (printf "%s-tls" (include "warren.nodeName" .)) $n.tlsSecret -}}
{{- end -}}

{{- define "warren.caSecret" -}}
{{- default (printf "%s-ca" (include "warren.fullname" .)) .Values.tls.caSecret -}}
{{- end -}}

{{- define "warren.apiTLSSecret" -}}
{{- default (printf "%s-api-tls" (include "warren.fullname" .)) .Values.api.tls.secretName -}}
{{- end -}}

{{/* Hashes of the credentials each role reads, as given in the values: a
pod template carries its own, so that changing one rolls those pods alone
(a new admin token restarts no node). Generated values are left out: they
are the same at every upgrade, and hashing a fresh random one at install
would roll every pod, sandboxes' nodes included, at the first upgrade. */}}
{{- define "warren.apiCredentialsChecksum" -}}
{{- list .Values.tokens .Values.database .Values.postgres.enabled .Values.postgres.password | toJson | sha256sum -}}
{{- end -}}

{{/* A node's pods roll when the names of its Secrets change (a new token
or certificate in the same Secret is read at the next start; cert-manager's
renewals are re-read in place). */}}
{{- define "warren.nodeCredentialsChecksum" -}}
{{- $ := index . 0 -}}
{{- list (include "warren.nodeTokenSecret" .) (include "warren.nodeTLSSecret" .) (include "warren.caSecret" $) $.Values.api.tls.enabled | toJson | sha256sum -}}
{{- end -}}

{{/* An API probe as the values give it, over HTTPS with api.tls.enabled:
include "warren.apiProbe" (list $ probe). */}}
{{- define "warren.apiProbe" -}}
{{- $ := index . 0 -}}
{{- $p := deepCopy (index . 1) -}}
{{- if and $.Values.api.tls.enabled $p.httpGet -}}
{{- $_ := set $p.httpGet "scheme" "HTTPS" -}}
{{- end -}}
{{- toYaml $p -}}
{{- end -}}
