# Plumeria server image: the static binary and nothing else.
#
# There is no Go image to build in (no registry), so the binary is built on
# the host first; `make image` does both:
#
#	CGO_ENABLED=0 go build -o bin/plumeria ./cmd/plumeria
#	docker build -t plumeria:dev .
#
# The server needs no file from the image at run time: no system CA
# certificates (mutual TLS uses the cluster's own CA, bound in at /certs by
# deploy/compose.yaml), no /tmp, no home directory, no time zone (logs are UTC), and
# addresses are IPs, so no resolver. Docker provides /etc/hosts,
# /etc/resolv.conf and the host name. State lives under --data (a volume).
FROM scratch
COPY bin/plumeria /plumeria
ENTRYPOINT ["/plumeria"]
CMD ["--help"]
