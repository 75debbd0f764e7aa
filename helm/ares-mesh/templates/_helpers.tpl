{{/*
Names and labels.
*/}}
{{- define "ares-mesh.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ares-mesh.fullname" -}}
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

{{- define "ares-mesh.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "ares-mesh.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ares-mesh
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "ares-mesh.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ares-mesh.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The services: values key -> `ares run <name>`. */}}
{{- define "ares-mesh.components" -}}
runtimeManager: runtime-manager
healthChecker: health-checker
compactor: compactor
replayReader: replay-reader
{{- end -}}

{{/* Labels of one component; call with (dict "root" $ "component" "runtime-manager"). */}}
{{- define "ares-mesh.componentLabels" -}}
{{ include "ares-mesh.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "ares-mesh.componentSelectorLabels" -}}
{{ include "ares-mesh.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "ares-mesh.componentName" -}}
{{- printf "%s-%s" (include "ares-mesh.fullname" .root | trunc 47 | trimSuffix "-") .component -}}
{{- end -}}

{{- define "ares-mesh.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "ares-mesh.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ares-mesh.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
Secrets: the user's own (existingSecret) or the one the chart renders from the values.
*/}}
{{- define "ares-mesh.kafkaSecretName" -}}
{{- if .Values.kafka.sasl.existingSecret -}}
{{- .Values.kafka.sasl.existingSecret -}}
{{- else if .Values.kafka.sasl.username -}}
{{- printf "%s-kafka" (include "ares-mesh.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/*
The Kafka credentials of one service: its own Secret (kafka.sasl.services.<key>.existingSecret),
the one the chart renders from its own username/password, else the shared one.
Call with (dict "root" $ "key" "runtimeManager" "component" "runtime-manager").
*/}}
{{- define "ares-mesh.kafkaSecretFor" -}}
{{- $own := index (.root.Values.kafka.sasl.services | default dict) .key | default dict -}}
{{- if $own.existingSecret -}}
{{- $own.existingSecret -}}
{{- else if $own.username -}}
{{- printf "%s-kafka-%s" (include "ares-mesh.fullname" .root | trunc 40 | trimSuffix "-") .component -}}
{{- else -}}
{{- include "ares-mesh.kafkaSecretName" .root -}}
{{- end -}}
{{- end -}}

{{- define "ares-mesh.postgresSecretName" -}}
{{- default (printf "%s-postgres" (include "ares-mesh.fullname" .)) .Values.postgres.existingSecret -}}
{{- end -}}

{{- define "ares-mesh.postgresSecretKey" -}}
{{- if .Values.postgres.existingSecret -}}{{ .Values.postgres.existingSecretKey }}{{- else -}}dsn{{- end -}}
{{- end -}}

{{- define "ares-mesh.tlsEnabled" -}}
{{- if and (has .Values.kafka.securityProtocol (list "SSL" "SASL_SSL")) .Values.kafka.tls.existingSecret -}}true{{- end -}}
{{- end -}}

{{- define "ares-mesh.topicsFile" -}}
{{- default (.Files.Get "files/topics.yaml") .Values.topics.file -}}
{{- end -}}

{{/*
The partition count of the co-partitioned topics, resolved the way `ares` resolves it:
topics.partitions, else the chosen environment's, else the file's top level.
*/}}
{{- define "ares-mesh.partitions" -}}
{{- $doc := include "ares-mesh.topicsFile" . | fromYaml -}}
{{- if hasKey $doc "Error" -}}
{{- fail (printf "topics.file is not valid YAML: %s" $doc.Error) -}}
{{- end -}}
{{- $partitions := $doc.partitions -}}
{{- $env := .Values.topics.environment -}}
{{- if $env -}}
{{- $envs := $doc.environments | default dict -}}
{{- if not (hasKey $envs $env) -}}
{{- fail (printf "topics.environment %q is not an environment of topics.yaml (defined: %s)" $env (keys $envs | sortAlpha | join ", ")) -}}
{{- end -}}
{{- with (index $envs $env) }}{{ with .partitions }}{{ $partitions = . }}{{ end }}{{ end -}}
{{- end -}}
{{- with .Values.topics.partitions }}{{ $partitions = . }}{{ end -}}
{{- $partitions | int -}}
{{- end -}}

{{/* Grace period of the runtime manager: the shutdown phases plus a margin. */}}
{{- define "ares-mesh.runtimeManagerGrace" -}}
{{- with .Values.shutdown -}}
{{- add .drainSeconds .finishSeconds .snapshotSeconds .releaseSeconds .marginSeconds -}}
{{- end -}}
{{- end -}}

{{/*
The ARES_* settings every process shares (the ConfigMap's data; the hook Job's env).
ARES_HTTP_PORT is not one of them: each service has its own (<component>.httpPort).
*/}}
{{- define "ares-mesh.configData" -}}
{{- /* The arena (worker.crash: a runtime manager exits on request) is for demos only. */ -}}
{{- if hasKey .Values.settings.extraEnv "ARES_ARENA" -}}
{{- fail "settings.extraEnv.ARES_ARENA: the arena is settings.arena, set that instead" -}}
{{- end -}}
{{- if and .Values.settings.arena (eq (toString .Values.topics.environment) "production") -}}
{{- fail "settings.arena: the arena (worker.crash makes runtime managers exit on request) is refused with topics.environment production" -}}
{{- end -}}
ARES_KAFKA_BOOTSTRAP: {{ .Values.kafka.bootstrapServers | quote }}
ARES_KAFKA_SECURITY_PROTOCOL: {{ .Values.kafka.securityProtocol | quote }}
{{- if hasPrefix "SASL_" .Values.kafka.securityProtocol }}
ARES_KAFKA_SASL_MECHANISM: {{ .Values.kafka.sasl.mechanism | quote }}
{{- end }}
{{- if include "ares-mesh.tlsEnabled" . }}
ARES_KAFKA_SSL_CA_FILE: {{ printf "/etc/ares/kafka-tls/%s" .Values.kafka.tls.caKey | quote }}
{{- if and .Values.kafka.tls.certKey .Values.kafka.tls.keyKey }}
ARES_KAFKA_SSL_CERT_FILE: {{ printf "/etc/ares/kafka-tls/%s" .Values.kafka.tls.certKey | quote }}
ARES_KAFKA_SSL_KEY_FILE: {{ printf "/etc/ares/kafka-tls/%s" .Values.kafka.tls.keyKey | quote }}
{{- end }}
{{- end }}
ARES_TOPIC_PREFIX: {{ .Values.topics.prefix | quote }}
ARES_TOPICS_FILE: "/etc/ares/topics/topics.yaml"
{{- with .Values.topics.environment }}
ARES_TOPIC_ENVIRONMENT: {{ . | quote }}
{{- end }}
{{- with .Values.topics.partitions }}
ARES_TOPIC_PARTITIONS: {{ . | quote }}
{{- end }}
{{- with .Values.topics.replicationFactor }}
ARES_TOPIC_REPLICATION_FACTOR: {{ . | quote }}
{{- end }}
ARES_LOG_LEVEL: {{ .Values.settings.logLevel | quote }}
ARES_MAX_RECORD_BYTES: {{ .Values.settings.maxRecordBytes | int64 | quote }}
ARES_REQUEST_TIMEOUT_S: {{ .Values.settings.requestTimeoutSeconds | quote }}
ARES_STARTUP_TIMEOUT_S: {{ .Values.settings.startupTimeoutSeconds | quote }}
ARES_ARENA: {{ ternary "1" "0" (.Values.settings.arena | default false) | quote }}
{{- range $name, $value := .Values.settings.extraEnv }}
{{ $name }}: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{/*
Kafka credentials; call with (dict "root" $ "secret" <name>). The username as env, the
password as a file of the Secret mounted at /etc/ares/kafka-sasl (ares-mesh.volumes): an
environment variable would show in /proc/<pid>/environ.
*/}}
{{- define "ares-mesh.kafkaSecretEnv" -}}
{{- if .secret }}
- name: ARES_KAFKA_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ .secret }}
      key: {{ .root.Values.kafka.sasl.usernameKey }}
- name: ARES_KAFKA_SASL_PASSWORD_FILE
  value: "/etc/ares/kafka-sasl/password"
{{- end }}
{{- end -}}

{{/* Volumes; call with (dict "root" $ "topics" <ConfigMap name> "kafkaSecret" <name or "">). */}}
{{- define "ares-mesh.volumes" -}}
- name: topics
  configMap:
    name: {{ .topics }}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- if include "ares-mesh.tlsEnabled" .root }}
- name: kafka-tls
  secret:
    secretName: {{ .root.Values.kafka.tls.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- with .kafkaSecret }}
- name: kafka-sasl
  secret:
    secretName: {{ . }}
    defaultMode: 0440
    items:
      - key: {{ $.root.Values.kafka.sasl.passwordKey }}
        path: password
{{- end }}
{{- end -}}

{{/* Mounts; call with (dict "root" $ "kafkaSecret" <name or "">). */}}
{{- define "ares-mesh.volumeMounts" -}}
- name: topics
  mountPath: /etc/ares/topics
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if include "ares-mesh.tlsEnabled" .root }}
- name: kafka-tls
  mountPath: /etc/ares/kafka-tls
  readOnly: true
{{- end }}
{{- if .kafkaSecret }}
- name: kafka-sasl
  mountPath: /etc/ares/kafka-sasl
  readOnly: true
{{- end }}
{{- end -}}

{{- define "ares-mesh.podSecurity" -}}
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
The pod template of a long-running service. Call with
(dict "root" $ "key" "runtimeManager" "component" "runtime-manager" "env" <extra env YAML>
      "grace" <seconds>).
*/}}
{{- define "ares-mesh.servicePod" -}}
{{- $root := .root -}}
{{- $values := index $root.Values .key -}}
{{- $kafkaSecret := include "ares-mesh.kafkaSecretFor" (dict "root" $root "key" .key "component" .component) -}}
{{- /* One port per service, from its own value: an ARES_HTTP_PORT of extraEnv would leave
       the containerPort, the probes and the Service on another port than the process. */}}
{{- if hasKey $root.Values.settings.extraEnv "ARES_HTTP_PORT" -}}
{{- fail "settings.extraEnv.ARES_HTTP_PORT: each service has its own port, set <component>.httpPort (e.g. runtimeManager.httpPort)" -}}
{{- end -}}
{{- range $values.extraEnv -}}
{{- if eq (toString .name) "ARES_HTTP_PORT" -}}
{{- fail (printf "%s.extraEnv: ARES_HTTP_PORT comes from %s.httpPort, set that instead" $.key $.key) -}}
{{- end -}}
{{- if eq (toString .name) "ARES_ARENA" -}}
{{- fail (printf "%s.extraEnv: ARES_ARENA comes from settings.arena, set that instead" $.key) -}}
{{- end -}}
{{- end -}}
metadata:
  labels:
    {{- include "ares-mesh.componentLabels" (dict "root" $root "component" .component) | nindent 4 }}
    {{- with $values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    checksum/config: {{ include (print $root.Template.BasePath "/configmap.yaml") $root | sha256sum }}
    checksum/secret: {{ include (print $root.Template.BasePath "/secret.yaml") $root | sha256sum }}
    {{- with $values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "ares-mesh.serviceAccountName" $root }}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: {{ .grace }}
  {{- with (include "ares-mesh.podSecurity" $root | trim) }}
  {{- . | nindent 2 }}
  {{- end }}
  containers:
    - name: {{ .component }}
      image: {{ include "ares-mesh.image" $root }}
      imagePullPolicy: {{ $root.Values.image.pullPolicy }}
      args:
        - run
        - {{ .component }}
        {{- with $values.extraArgs }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      ports:
        - name: http
          containerPort: {{ $values.httpPort }}
          protocol: TCP
      envFrom:
        - configMapRef:
            name: {{ include "ares-mesh.fullname" $root }}-config
      {{- $env := list (printf "- name: ARES_HTTP_PORT\n  value: %q" (toString $values.httpPort))
            (.env | default "" | trim)
            (include "ares-mesh.kafkaSecretEnv" (dict "root" $root "secret" $kafkaSecret) | trim)
            (ternary (toYaml $values.extraEnv) "" (not (empty $values.extraEnv)))
          | compact | join "\n" }}
      {{- with $env }}
      env:
        {{- . | nindent 8 }}
      {{- end }}
      startupProbe:
        httpGet:
          path: /healthz
          port: http
        periodSeconds: {{ $root.Values.probes.startup.periodSeconds }}
        failureThreshold: {{ $root.Values.probes.startup.failureThreshold }}
      livenessProbe:
        httpGet:
          path: /healthz
          port: http
        periodSeconds: {{ $root.Values.probes.liveness.periodSeconds }}
        timeoutSeconds: {{ $root.Values.probes.liveness.timeoutSeconds }}
        failureThreshold: {{ $root.Values.probes.liveness.failureThreshold }}
      readinessProbe:
        httpGet:
          path: /readyz
          port: http
        periodSeconds: {{ $root.Values.probes.readiness.periodSeconds }}
        timeoutSeconds: {{ $root.Values.probes.readiness.timeoutSeconds }}
        failureThreshold: {{ $root.Values.probes.readiness.failureThreshold }}
      {{- with $values.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.securityContext }}
      securityContext:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        {{- include "ares-mesh.volumeMounts" (dict "root" $root "kafkaSecret" $kafkaSecret) | nindent 8 }}
  volumes:
    {{- include "ares-mesh.volumes" (dict "root" $root "topics" (printf "%s-topics" (include "ares-mesh.fullname" $root)) "kafkaSecret" $kafkaSecret) | nindent 4 }}
  {{- with $values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $values.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- range . }}
    {{- $constraint := deepCopy . }}
    {{- if not (hasKey $constraint "labelSelector") }}
    {{- /* Without a selector a constraint spreads nothing: default to this component's pods. */}}
    {{- $_ := set $constraint "labelSelector" (dict "matchLabels" (include "ares-mesh.componentSelectorLabels" (dict "root" $root "component" $.component) | fromYaml)) }}
    {{- end }}
    - {{ toYaml $constraint | indent 6 | trim }}
    {{- end }}
  {{- end }}
{{- end -}}
