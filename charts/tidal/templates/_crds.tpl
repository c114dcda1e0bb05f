{{/*
Pieces of the CRDs tidal serves (crds-*.yaml). Their schemas are the autoscaling.x-k8s.io API as
cluster-autoscaler publishes it, so objects written for cluster-autoscaler are accepted unchanged.
*/}}

{{- define "tidal.crd.metadata" -}}
labels:
  {{- include "tidal.labels" . | nindent 2 }}
{{- if .Values.crds.keep }}
annotations:
  # Deleting a CRD deletes every object of it: helm uninstall leaves them.
  helm.sh/resource-policy: keep
{{- end }}
{{- end -}}

{{/* The standard metav1.Condition list, keyed by type. */}}
{{- define "tidal.crd.conditions" -}}
type: array
description: What the autoscaler observed about the object, one condition per type.
x-kubernetes-list-type: map
x-kubernetes-list-map-keys: [type]
items:
  type: object
  required: [lastTransitionTime, message, reason, status, type]
  properties:
    lastTransitionTime:
      description: When the condition last changed status.
      type: string
      format: date-time
    message:
      description: Details of the transition, for people.
      type: string
      maxLength: 32768
    observedGeneration:
      description: The metadata.generation the condition was set from.
      type: integer
      format: int64
      minimum: 0
    reason:
      description: Why the condition last changed, in CamelCase.
      type: string
      minLength: 1
      maxLength: 1024
      pattern: ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$
    status:
      description: True, False or Unknown.
      type: string
      enum: ["True", "False", Unknown]
    type:
      description: The condition's type, CamelCase or prefixed with a domain (foo.example.com/CamelCase).
      type: string
      maxLength: 316
      pattern: ^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$
{{- end -}}

{{/* The schema of a ProvisioningRequest, the same in v1 and v1beta1. */}}
{{- define "tidal.crd.provisioningRequestSchema" -}}
type: object
description: >-
  Capacity wanted in the cluster for a set of pods not created yet: the autoscaler checks that it is there,
  or adds it, and says which in the status.
required: [spec]
properties:
  apiVersion:
    type: string
  kind:
    type: string
  metadata:
    type: object
  spec:
    type: object
    description: What capacity is wanted. The spec is immutable; to change it, delete and create anew.
    required: [podSets, provisioningClassName]
    properties:
      provisioningClassName:
        description: >-
          How the capacity is provisioned: check-capacity.autoscaling.x-k8s.io (only check that the cluster
          holds it), best-effort-atomic-scale-up.autoscaling.x-k8s.io (add all of it or none), or a class
          of a provider. The kubernetes.io suffix is reserved for classes of Kubernetes projects.
        type: string
        maxLength: 253
        pattern: ^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$
        x-kubernetes-validations:
          - rule: self == oldSelf
            message: Value is immutable
      podSets:
        description: The groups of pods the capacity is for.
        type: array
        minItems: 1
        maxItems: 32
        x-kubernetes-validations:
          - rule: self == oldSelf
            message: Value is immutable
        items:
          type: object
          required: [count, podTemplateRef]
          properties:
            count:
              description: How many pods of the template.
              type: integer
              format: int32
              minimum: 1
            podTemplateRef:
              description: The PodTemplate, in the same namespace, the pods will be made from.
              type: object
              required: [name]
              properties:
                name:
                  description: The PodTemplate's name.
                  type: string
                  maxLength: 253
                  pattern: ^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$
      parameters:
        description: >-
          Parameters of the provisioning class, e.g. ValidUntilSeconds for best-effort-atomic-scale-up (how
          long after creation to keep trying).
        type: object
        maxProperties: 100
        additionalProperties:
          type: string
          maxLength: 255
        x-kubernetes-validations:
          - rule: self == oldSelf
            message: Value is immutable
  status:
    type: object
    description: What the autoscaler made of the request (conditions Provisioned, Failed, CapacityAvailable, ...).
    properties:
      conditions:
        {{- include "tidal.crd.conditions" . | nindent 8 }}
      provisioningClassDetails:
        description: Further details a provisioning class reports.
        type: object
        maxProperties: 64
        additionalProperties:
          type: string
          maxLength: 32768
{{- end -}}
