# syntax=docker/dockerfile:1

# ---- build stage -----------------------------------------------------------
FROM golang:1.26 AS build

WORKDIR /src

# Download modules first so this layer is cached until go.mod/go.sum change.
COPY go.mod go.sum ./
RUN go mod download

COPY . .

# Static binary: the runtime image has no libc.
# The binary is the CLI's module (cmd/agentsaga), built on the library beside it.
RUN cd cmd/agentsaga && go mod download && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/agentsaga .

# ---- runtime stage ---------------------------------------------------------
# distroless/static: CA certificates and tzdata, no shell, no package manager.
# The :nonroot variant runs as uid/gid 65532.
FROM gcr.io/distroless/static-debian12:nonroot

COPY --from=build /out/agentsaga /agentsaga

USER nonroot:nonroot

ENTRYPOINT ["/agentsaga"]
CMD ["worker"]
