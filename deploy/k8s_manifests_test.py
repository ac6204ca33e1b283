"""Checks the deployment files against each other: the Kubernetes manifests
(deploy/k8s), the image (deploy/docker/Dockerfile) and the compose files.

Each manifest must parse, and what one file says about another must hold:
flags point at mounted files, ports agree between the daemon's flags, its
container ports, the Prometheus annotations, the Service and the image,
probes speak to the socket the daemon listens on, the GPU is requested,
nothing runs as root but the one init step, and one image tag is used
throughout. The compose files must validate (docker-compose config -q,
which needs no Docker engine).
"""

import json
import os
import re
import shutil
import subprocess
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
K8S = os.path.join(HERE, "k8s")
NAMESPACE = "gpustream"
# The Secret an operator creates (kustomization.yaml, docs/containers.md).
TLS_SECRET = "gpustream-tls"
UID = 10001


# The repository root: the runfiles tree under Bazel, else this file's parent.
REPO = os.path.dirname(HERE)


def read_repo_file(relative):
    with open(os.path.join(REPO, relative), encoding="utf-8") as f:
        return f.read()


def load(name):
    with open(os.path.join(K8S, name), encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def flags(args):
    """--name=value flags as {name: [values]} (--listen repeats)."""
    out = {}
    for arg in args:
        match = re.fullmatch(r"--([a-z_]+)=(.*)", arg)
        if match is None:
            raise AssertionError(f"argument {arg!r} is not --flag=value")
        out.setdefault(match.group(1), []).append(match.group(2))
    return out


def port_of(address):
    return int(address.rsplit(":", 1)[1])


class ManifestsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.files = sorted(f for f in os.listdir(K8S) if f.endswith(".yaml"))
        cls.objects = {}
        for name in cls.files:
            if name == "kustomization.yaml":
                continue
            for doc in load(name):
                cls.objects[(doc["kind"], doc["metadata"]["name"])] = doc
        cls.kustomization = load("kustomization.yaml")[0]
        cls.ds = cls.objects[("DaemonSet", "gpustreamd")]
        cls.pod = cls.ds["spec"]["template"]["spec"]
        (cls.daemon,) = [c for c in cls.pod["containers"]
                         if c["name"] == "gpustreamd"]
        cls.flags = flags(cls.daemon["args"])
        cls.mounts = {m["name"]: m for m in cls.daemon["volumeMounts"]}
        cls.volumes = {v["name"]: v for v in cls.pod["volumes"]}

    def mounted_source(self, path):
        """(volume, key inside it) of the mount holding the file `path`."""
        for name, mount in self.mounts.items():
            prefix = mount["mountPath"].rstrip("/") + "/"
            if path.startswith(prefix):
                return self.volumes[name], path[len(prefix):]
        self.fail(f"{path} is on no volume mount of the gpustreamd container")

    def test_kustomization_lists_every_manifest(self):
        self.assertEqual(sorted(self.kustomization["resources"]),
                         [f for f in self.files if f != "kustomization.yaml"])
        kinds = {kind for kind, _ in self.objects}
        self.assertEqual(kinds, {"Namespace", "ConfigMap", "DaemonSet",
                                 "Service"})

    def test_everything_lives_in_the_namespace(self):
        self.assertIn(("Namespace", NAMESPACE), self.objects)
        for (kind, name), obj in self.objects.items():
            if kind != "Namespace":
                self.assertEqual(obj["metadata"].get("namespace"), NAMESPACE,
                                 f"{kind}/{name}")

    def test_selectors_match_the_pod_labels(self):
        labels = self.ds["spec"]["template"]["metadata"]["labels"]
        for selector in (self.ds["spec"]["selector"]["matchLabels"],
                         self.objects[("Service", "gpustreamd")]["spec"][
                             "selector"]):
            for key, value in selector.items():
                self.assertEqual(labels.get(key), value, key)

    def test_only_gpu_nodes_get_a_daemon(self):
        self.assertEqual(self.pod["nodeSelector"],
                         {"nvidia.com/gpu.present": "true"})

    def test_one_gpu_is_requested(self):
        resources = self.daemon["resources"]
        self.assertEqual(resources["limits"]["nvidia.com/gpu"], 1)
        self.assertEqual(resources["requests"]["nvidia.com/gpu"], 1)

    def test_the_daemon_runs_unprivileged(self):
        pod = self.pod["securityContext"]
        self.assertIs(pod["runAsNonRoot"], True)
        self.assertEqual((pod["runAsUser"], pod["runAsGroup"], pod["fsGroup"]),
                         (UID, UID, UID))
        ctx = self.daemon["securityContext"]
        self.assertIs(ctx["allowPrivilegeEscalation"], False)
        self.assertIs(ctx["readOnlyRootFilesystem"], True)
        self.assertEqual(ctx["capabilities"]["drop"], ["ALL"])
        self.assertNotIn("add", ctx["capabilities"])
        self.assertNotIn("runAsUser", ctx)  # The pod's 10001.

    def test_only_the_socket_dir_init_step_is_root_with_two_capabilities(self):
        for init in self.pod.get("initContainers", []):
            ctx = init["securityContext"]
            self.assertEqual(ctx["capabilities"]["drop"], ["ALL"])
            self.assertLessEqual(set(ctx["capabilities"].get("add", [])),
                                 {"CHOWN", "FOWNER"})
            self.assertIs(ctx["allowPrivilegeEscalation"], False)
            for mount in init["volumeMounts"]:
                self.assertIn(mount["name"], self.volumes)

    def test_tls_flags_point_at_the_mounted_secret(self):
        for flag, key in (("tls_cert", "tls.crt"), ("tls_key", "tls.key")):
            (path,) = self.flags[flag]
            volume, inside = self.mounted_source(path)
            self.assertEqual(volume.get("secret", {}).get("secretName"),
                             TLS_SECRET, flag)
            # A kubernetes.io/tls Secret holds exactly these keys.
            self.assertEqual(inside, key, flag)
        # Readable by the daemon's group only.
        self.assertEqual(self.volumes["tls"]["secret"]["defaultMode"], 0o440)

    def test_config_flag_points_at_a_key_of_the_configmap(self):
        (path,) = self.flags["config"]
        volume, key = self.mounted_source(path)
        name = volume["configMap"]["name"]
        data = self.objects[("ConfigMap", name)]["data"]
        self.assertIn(key, data)
        config = data[key]
        # Flags own the listeners; the file has tenants with digests only.
        self.assertNotRegex(config, r"(?m)^\s*listen:")
        digests = re.findall(r'token_sha256:\s*"([^"]*)"', config)
        self.assertTrue(digests)
        for digest in digests:
            self.assertRegex(digest, r"^[0-9a-f]{64}$")
        self.assertNotRegex(config, r"(?m)^\s*token:")
        self.assertRegex(config, r"admin:\s*true")
        # And the daemon can read it: a ServerConfig in text format, as
        # protoc parses it against the project's own schema.
        for text in (config, read_repo_file("deploy/gpustreamd.textproto")):
            encode = subprocess.run(
                ["protoc", f"-I{os.path.join(REPO, 'proto')}",
                 "--encode=gpustream.v1.ServerConfig",
                 "gpustream/v1/server_config.proto"],
                input=text.encode(), capture_output=True, timeout=60,
                check=False)
            self.assertEqual(encode.returncode, 0, encode.stderr.decode())

    def test_the_socket_is_on_the_host_path(self):
        sockets = [a[len("unix:"):] for a in self.flags["listen"]
                   if a.startswith("unix:")]
        self.assertEqual(len(sockets), 1)
        volume, _ = self.mounted_source(sockets[0])
        self.assertEqual(volume["hostPath"]["type"], "DirectoryOrCreate")
        self.assertEqual(volume["hostPath"]["path"],
                         os.path.dirname(sockets[0]))

    def test_probes_run_gpustreamctl_health_on_the_socket(self):
        (socket,) = [a for a in self.flags["listen"] if a.startswith("unix:")]
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            spec = self.daemon[probe]
            # Kubernetes' grpc probe dials plaintext; TCP here is TLS only.
            self.assertNotIn("grpc", spec, probe)
            command = spec["exec"]["command"]
            self.assertEqual(command[0], "/usr/local/bin/gpustreamctl")
            self.assertEqual(command[-1], "health")
            self.assertIn(f"--target={socket}", command)
            # gpustreamctl gives up before the kubelet does.
            (timeout,) = [c for c in command if c.startswith("--timeout=")]
            self.assertLess(int(timeout[len("--timeout="):-1]),
                            spec["timeoutSeconds"], probe)

    def test_ports_agree_everywhere(self):
        ports = {p["name"]: p["containerPort"] for p in self.daemon["ports"]}
        tcp = [a for a in self.flags["listen"] if not a.startswith("unix:")]
        self.assertEqual([port_of(a) for a in tcp], [ports["grpc"]])
        (metrics,) = self.flags["metrics_listen"]
        self.assertEqual(port_of(metrics), ports["metrics"])

        notes = self.ds["spec"]["template"]["metadata"]["annotations"]
        self.assertEqual(notes["prometheus.io/scrape"], "true")
        self.assertEqual(int(notes["prometheus.io/port"]), ports["metrics"])
        self.assertEqual(notes["prometheus.io/path"], "/metrics")

        service = self.objects[("Service", "gpustreamd")]["spec"]
        for port in service["ports"]:
            self.assertIn(port["targetPort"], ports)
            self.assertEqual(port["port"], ports[port["targetPort"]])
        self.assertEqual({p["targetPort"] for p in service["ports"]},
                         set(ports))

        # The daemon's image is the Dockerfile's `runtime` stage (others,
        # such as `prometheus`, expose their own ports).
        with open(os.path.join(HERE, "docker", "Dockerfile")) as f:
            stages = re.split(r"(?m)^FROM \S+ AS (\S+)\s*$", f.read())
        runtime = dict(zip(stages[1::2], stages[2::2]))["runtime"]
        exposed = re.findall(r"(?m)^EXPOSE (.*)$", runtime)
        self.assertTrue(exposed)
        self.assertEqual({int(p) for line in exposed for p in line.split()},
                         set(ports.values()))

    def test_one_image_tag_throughout(self):
        containers = self.pod["containers"] + self.pod.get("initContainers",
                                                           [])
        images = {c["image"] for c in containers}
        self.assertEqual(len(images), 1, images)
        (image,) = images
        name, tag = image.rsplit(":", 1)
        self.assertNotEqual(tag, "latest")
        (entry,) = [i for i in self.kustomization["images"]
                    if i["name"] == name]
        self.assertEqual(entry["newTag"], tag)

    def test_tls_flags_and_no_plaintext_tcp(self):
        self.assertNotIn("allow_insecure_tcp", self.flags)
        self.assertIn("tls_cert", self.flags)
        (backend,) = self.flags["backend"]
        self.assertIn(backend, ("cuda", "auto"))


class ComposeTest(unittest.TestCase):

    def compose_config(self, *files):
        compose = shutil.which("docker-compose") or "/usr/bin/docker-compose"
        if not os.access(compose, os.X_OK):
            self.skipTest("docker-compose is not installed (tools/setup.sh)")
        args = [compose]
        for f in files:
            args += ["-f", os.path.join(HERE, f)]
        # No engine is contacted: config only parses and interpolates.
        env = dict(os.environ, DOCKER_HOST="unix:///nonexistent.sock",
                   HOME=os.environ.get("TEST_TMPDIR", "/tmp"))
        result = subprocess.run(args + ["config", "-q"], capture_output=True,
                                text=True, env=env, timeout=120, check=False)
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_compose_file_validates(self):
        self.compose_config("docker-compose.yml")

    def test_gpu_override_validates(self):
        self.compose_config("docker-compose.yml", "compose/gpu.yml")

    def test_compose_daemon_matches_the_image(self):
        with open(os.path.join(HERE, "docker-compose.yml")) as f:
            compose = yaml.safe_load(f)
        daemon = compose["services"]["gpustreamd"]
        args = flags(a.replace("${GPUSTREAM_BACKEND:-auto}", "auto")
                     .replace("${GPUSTREAM_LOG_LEVEL:-info}", "info")
                     for a in daemon["command"])
        self.assertNotIn("allow_insecure_tcp", args)
        (socket,) = [a for a in args["listen"] if a.startswith("unix:")]
        self.assertIn(f"--target={socket}", daemon["healthcheck"]["test"])
        self.assertEqual({port_of(a) for a in args["listen"]
                          if not a.startswith("unix:")} |
                         {port_of(args["metrics_listen"][0])},
                         {int(p) for p in daemon["expose"]})
        with open(os.path.join(HERE, "docker", "Dockerfile")) as f:
            dockerfile = f.read()
        healthcheck = re.search(r"(?ms)^HEALTHCHECK .*?CMD (\[.*?\])$",
                                dockerfile).group(1)
        image_check = json.loads(healthcheck.replace("\\\n", " "))
        self.assertEqual(image_check, daemon["healthcheck"]["test"][1:])


if __name__ == "__main__":
    unittest.main()
