"""The DRA device health API (``k8s.io/kubelet/pkg/apis/dra-health``), one package per version."""
