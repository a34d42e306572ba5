#!/usr/bin/env bash
# kafka-local.sh: run a real Apache Kafka 4.x on this machine for tests: a
# single node (KRaft, combined broker+controller), or a cluster of N such
# nodes forming a 3-voter (or N-voter) controller quorum.
#
#   scripts/kafka-local.sh start    # resolve jars (once), format, start, wait until it answers
#   scripts/kafka-local.sh stop     # TERM (then KILL) the broker(s) by pid; drop the default data dir(s)
#   scripts/kafka-local.sh status   # exit 0 and say so when it runs, exit 3 when it does not
#                                   # (a cluster with some nodes down: exit 4)
#   scripts/kafka-local.sh fetch    # only resolve the jars into the cache (e.g. to warm a CI cache)
#
#   scripts/kafka-local.sh start --brokers 3   # a 3-node cluster: RF 3, min.insync.replicas 2
#   scripts/kafka-local.sh stop-broker N       # kill -9 node N (a crash); its data stays
#   scripts/kafka-local.sh start --brokers 3 --proxy-port P
#                                              # each node N also listens on a PROXIED listener
#                                              # that advertises 127.0.0.1:P+N-1, where a fault
#                                              # proxy is expected (the fault campaign's);
#   scripts/kafka-local.sh proxies             # prints them: P=<proxied listener>,... (node order)
#   scripts/kafka-local.sh start-broker N      # restart node N on its data; waits until it is
#                                              # registered again and back in every ISR it belongs to
#
# start prints the bootstrap list on stdout (comma separated) and nothing else,
# so `HOOKSTREAM_TEST_BROKERS=$(scripts/kafka-local.sh start --brokers 3)` works.
# stop, status, stop-broker and start-broker find the cluster by KAFKA_PORT
# (its run dir) and need no --brokers.
#
# On a machine that also runs the tests, keep KAFKA_PORT below 20000 (as the
# default is): tests take free ports from 20000-32000 (kafkatest.FreeAddr), and
# outgoing connections take theirs from 32768 up.
#
# Cluster layout (N nodes, node ids 1..N): client ports KAFKA_PORT..KAFKA_PORT+N-1,
# controller ports KAFKA_CONTROLLER_PORT..+N-1 (default KAFKA_PORT+N), with
# --proxy-port the PROXIED listeners' ports KAFKA_CONTROLLER_PORT+N..+2N-1, each node
# in $KAFKA_RUN_DIR/node-<id>/ (server.properties, kafka.pid, kafka.log, data/).
# Clients bootstrapped on a PROXIED listener are told the proxy's addresses, so
# every connection they make goes through it; inter-broker traffic, the readiness
# probe and clients of the PLAINTEXT listeners never do.
# default.replication.factor, offsets and transaction state logs: min(3, N);
# min.insync.replicas and transaction.state.log.min.isr: RF-1 when RF >= 3, else 1.
# Failure detection is short (a 2s broker session, 1s quorum fetch timeout), so
# a crashed node is fenced, and its partitions get new leaders and smaller ISRs,
# within about 2 to 4 seconds.
#
# Needs only a JDK (17 or newer) and Maven: the broker and all its runtime
# dependencies come from Maven Central through `mvn`, into a cache dir, and
# are reused from there on the next run.
#
# Environment (all optional):
#   KAFKA_VERSION          org.apache.kafka:kafka_2.13 version (default below)
#   KAFKA_HOME             cache dir with pom.xml and libs/
#                          (default ${XDG_CACHE_HOME:-$HOME/.cache}/hookstream/kafka-$KAFKA_VERSION)
#   KAFKA_PORT             PLAINTEXT listener port, 127.0.0.1 (default 19092); a cluster's first
#   KAFKA_CONTROLLER_PORT  CONTROLLER listener port (default KAFKA_PORT+1; a cluster's first,
#                          default KAFKA_PORT+N)
#   KAFKA_RUN_DIR          pid file, server.properties, log4j2 config (default /tmp/hookstream-kafka-$KAFKA_PORT)
#   KAFKA_DATA             KRaft log dir (a cluster: node N uses $KAFKA_DATA/node-N); when unset it
#                          is $KAFKA_RUN_DIR/data (node-N/data), which is wiped on stop (and on
#                          start, if a dead broker left it behind)
#   KAFKA_LOG              broker stdout/stderr + log4j2 output, WARN and up; emptied on each
#                          start (default $KAFKA_RUN_DIR/kafka.log; a cluster: node-N/kafka.log)
#   KAFKA_HEAP_OPTS        default "-Xms256m -Xmx512m"; a cluster's nodes "-Xms128m -Xmx384m"
#   KAFKA_JVM_OPTS         extra JVM flags
#   KAFKA_START_TIMEOUT    seconds to wait for the broker(s) to answer (default 90; a cluster 180)
#   KAFKA_STOP_TIMEOUT     seconds between TERM and KILL (default 30)
#   KAFKA_MVN_OPTS         extra arguments for mvn (e.g. -Dmaven.repo.local=/some/dir)
#   JAVA_HOME              picks the java/javac to use (default: the ones on PATH)
set -euo pipefail

# Newest 4.x of org.apache.kafka:kafka_2.13 on Maven Central when this was written.
KAFKA_VERSION="${KAFKA_VERSION:-4.4.0}"
# log4j2 version pinned for log4j-api, log4j-core and log4j-slf4j-impl (the
# slf4j 1.x -> log4j2 binding Kafka's distribution ships) so the three always
# match; it is the one kafka-server 4.4.0 depends on.
KAFKA_LOG4J_VERSION="${KAFKA_LOG4J_VERSION:-2.25.5}"
KAFKA_HOME="${KAFKA_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/hookstream/kafka-$KAFKA_VERSION}"
KAFKA_PORT="${KAFKA_PORT:-19092}"
KAFKA_RUN_DIR="${KAFKA_RUN_DIR:-/tmp/hookstream-kafka-$KAFKA_PORT}"
# A cluster's size is recorded in its run dir, so every command after start
# finds it from KAFKA_PORT alone.
CLUSTER_FILE="$KAFKA_RUN_DIR/brokers"
# The first port the PROXIED listeners advertise (start --proxy-port), likewise.
PROXY_FILE="$KAFKA_RUN_DIR/proxy-port"

CMD="${1:-}"
[[ $# -gt 0 ]] && shift
NODE=""
BROKERS=""
PROXY_PORT=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --proxy-port) [[ $# -ge 2 ]] || { echo "kafka-local: --proxy-port needs a port" >&2; exit 2; }; PROXY_PORT="$2"; shift 2 ;;
    --proxy-port=*) PROXY_PORT="${1#--proxy-port=}"; shift ;;
    --brokers) [[ $# -ge 2 ]] || { echo "kafka-local: --brokers needs a number" >&2; exit 2; }; BROKERS="$2"; shift 2 ;;
    --brokers=*) BROKERS="${1#--brokers=}"; shift ;;
    *)
      if [[ -z "$NODE" && "$1" =~ ^[0-9]+$ ]]; then NODE="$1"; shift; continue; fi
      echo "kafka-local: unexpected argument: $1" >&2
      exit 2
      ;;
  esac
done
if [[ "$CMD" != start && -f "$CLUSTER_FILE" ]]; then BROKERS="$(cat "$CLUSTER_FILE")"; fi
if [[ "$CMD" != start && -f "$PROXY_FILE" ]]; then PROXY_PORT="$(cat "$PROXY_FILE")"; fi
[[ -z "$PROXY_PORT" || "$PROXY_PORT" =~ ^[1-9][0-9]*$ ]] || { echo "kafka-local: invalid proxy port ${PROXY_PORT}" >&2; exit 2; }
BROKERS="${BROKERS:-1}"
[[ "$BROKERS" =~ ^[1-9]$ ]] || { echo "kafka-local: invalid broker count ${BROKERS} (want 1 to 9)" >&2; exit 2; }
# CLUSTER: start --brokers N with N > 1, or a command on a cluster that start made
CLUSTER=0
if ((BROKERS > 1)) || [[ "$CMD" != start && -f "$CLUSTER_FILE" ]]; then CLUSTER=1; fi

if ((CLUSTER)); then
  KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-$((KAFKA_PORT + BROKERS))}"
  KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms128m -Xmx384m}"
  KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-180}"
else
  KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-$((KAFKA_PORT + 1))}"
  KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m}"
  KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
fi
if [[ -n "${KAFKA_DATA:-}" ]]; then
  DATA_IS_DEFAULT=0
else
  KAFKA_DATA="$KAFKA_RUN_DIR/data"
  DATA_IS_DEFAULT=1
fi
KAFKA_LOG="${KAFKA_LOG:-$KAFKA_RUN_DIR/kafka.log}"
KAFKA_JVM_OPTS="${KAFKA_JVM_OPTS:-}"
KAFKA_STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-30}"
KAFKA_MVN_OPTS="${KAFKA_MVN_OPTS:-}"

BOOTSTRAP="127.0.0.1:$KAFKA_PORT"
LIBS="$KAFKA_HOME/libs"
TOOLS="$KAFKA_HOME/tools"
PID_FILE="$KAFKA_RUN_DIR/kafka.pid"
PROPS="$KAFKA_RUN_DIR/server.properties"
LOG4J_CONF="$KAFKA_RUN_DIR/log4j2.xml"

# Replication of a cluster: min(3, N); min ISR RF-1 from RF 3 on, else 1.
RF=$((BROKERS < 3 ? BROKERS : 3))
MIN_ISR=$((RF >= 3 ? RF - 1 : 1))

if [[ -n "${JAVA_HOME:-}" ]]; then
  JAVA="$JAVA_HOME/bin/java"
  JAVAC="$JAVA_HOME/bin/javac"
else
  JAVA="$(command -v java || true)"
  JAVAC="$(command -v javac || true)"
fi

log() { printf 'kafka-local: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- checks
need_java() {
  [[ -n "$JAVA" && -x "$JAVA" ]] || die "java not found: install a JDK 17+ (e.g. apt-get install openjdk-17-jdk-headless) or set JAVA_HOME"
  local v major
  v="$("$JAVA" -version 2>&1 | sed -n 's/.* version "\([^"]*\)".*/\1/p' | head -n1)"
  major="${v%%.*}"
  [[ "$major" == 1 ]] && major="$(cut -d. -f2 <<<"$v")"
  [[ "$major" =~ ^[0-9]+$ ]] || die "cannot tell the Java version from: $("$JAVA" -version 2>&1 | head -n1)"
  ((major >= 17)) || die "Kafka $KAFKA_VERSION needs Java 17+, found $v at $JAVA"
}

# ---------------------------------------------------------------- jars
write_pom() {
  cat >"$KAFKA_HOME/pom.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by hookstream scripts/kafka-local.sh: only used to resolve the broker's jars. -->
<project xmlns="http://maven.apache.org/POM/4.0.0"
         xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
         xsi:schemaLocation="http://maven.apache.org/POM/4.0.0 https://maven.apache.org/xsd/maven-4.0.0.xsd">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.hookstream</groupId>
  <artifactId>kafka-local-runtime</artifactId>
  <version>$KAFKA_VERSION</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
      <exclusions>
        <!-- Interfaces for the console tools (RecordReader, Decoder); no broker class uses
             them, and kafka-tools-api-4.4.0 is missing from Maven Central. -->
        <exclusion>
          <groupId>org.apache.kafka</groupId>
          <artifactId>kafka-tools-api</artifactId>
        </exclusion>
      </exclusions>
    </dependency>
    <!-- Kafka logs through slf4j 1.x; route it to log4j2 (log4j-api/core come with kafka-server). -->
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>$KAFKA_LOG4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-api</artifactId>
      <version>$KAFKA_LOG4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>$KAFKA_LOG4J_VERSION</version>
    </dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-dependency-plugin</artifactId>
        <version>3.8.1</version>
      </plugin>
    </plugins>
  </build>
</project>
EOF
}

# Readiness probe, compiled into the cache (again whenever this source
# changes): waits until the cluster at argv[0] answers metadata requests
# (describeCluster + describeFeatures) with at least argv[3] brokers
# registered (default 1), giving up after argv[1] ms or as soon as one of
# the pids in argv[2] (comma separated) is gone. With argv[4], a node id, it
# also waits until that broker is registered and is in the ISR of every
# partition it replicates.
write_probe() {
  cat >"$1" <<'EOF'
import java.io.InputStream;
import java.util.Collection;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartitionInfo;

public final class KafkaLocalProbe {
  public static void main(String[] args) throws Exception {
    String bootstrap = args[0];
    long deadline = System.currentTimeMillis() + Long.parseLong(args[1]);
    String[] pids = args[2].split(",");
    int minNodes = args.length > 3 ? Integer.parseInt(args[3]) : 1;
    int nodeId = args.length > 4 ? Integer.parseInt(args[4]) : -1;
    Properties p = new Properties();
    p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "3000");
    p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "5000");
    p.put(AdminClientConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");
    Exception last = null;
    try (Admin admin = Admin.create(p)) {
      while (System.currentTimeMillis() < deadline) {
        for (String pid : pids) {
          if (!ProcessHandle.of(Long.parseLong(pid)).map(ProcessHandle::isAlive).orElse(false)) {
            System.err.println("broker process " + pid + " exited");
            System.exit(2);
          }
        }
        try {
          DescribeClusterResult c = admin.describeCluster();
          Collection<Node> nodes = c.nodes().get(5, TimeUnit.SECONDS);
          String clusterId = c.clusterId().get(5, TimeUnit.SECONDS);
          boolean registered = nodeId < 0 || nodes.stream().anyMatch(n -> n.id() == nodeId);
          String lagging = registered && nodeId >= 0 ? outOfSync(admin, nodeId) : null;
          if (nodes.size() > 0 && nodes.size() >= minNodes && registered && lagging == null) {
            FeatureMetadata f = admin.describeFeatures().featureMetadata().get(5, TimeUnit.SECONDS);
            FinalizedVersionRange mv = f.finalizedFeatures().get("metadata.version");
            System.out.println("version=" + kafkaVersion());
            System.out.println("cluster_id=" + clusterId);
            System.out.println("metadata_version_level=" + (mv == null ? "?" : mv.maxVersionLevel()));
            System.out.println("nodes=" + nodes.size());
            return;
          }
          last = new Exception(lagging != null ? lagging
              : !registered ? "broker " + nodeId + " not registered yet"
              : nodes.size() + " of " + minNodes + " brokers registered");
        } catch (Exception e) {
          last = e;
        }
        Thread.sleep(300);
      }
    }
    System.err.println("cluster at " + bootstrap + " not ready in time" + (last == null ? "" : ": " + last));
    System.exit(1);
  }

  // null when broker id is in the ISR of every partition that it replicates,
  // else what is still missing. Topics deleted meanwhile are skipped.
  static String outOfSync(Admin admin, int id) throws Exception {
    Set<String> names = admin.listTopics(new ListTopicsOptions().listInternal(true)).names().get(10, TimeUnit.SECONDS);
    int missing = 0;
    String example = null;
    for (Map.Entry<String, KafkaFuture<TopicDescription>> e : admin.describeTopics(names).topicNameValues().entrySet()) {
      TopicDescription d;
      try {
        d = e.getValue().get(10, TimeUnit.SECONDS);
      } catch (Exception gone) {
        continue;
      }
      for (TopicPartitionInfo tp : d.partitions()) {
        boolean replica = tp.replicas().stream().anyMatch(n -> n.id() == id);
        boolean inSync = tp.isr().stream().anyMatch(n -> n.id() == id);
        if (replica && !inSync) {
          missing++;
          if (example == null) example = d.name() + "-" + tp.partition();
        }
      }
    }
    return missing == 0 ? null : "broker " + id + " not yet in the ISR of " + missing + " partitions (e.g. " + example + ")";
  }

  // The version of the kafka-clients jar on the classpath, i.e. of the broker's jars
  // (AppInfoParser moved between 4.x releases; this resource did not).
  static String kafkaVersion() {
    try (InputStream in = Admin.class.getResourceAsStream("/kafka/kafka-version.properties")) {
      Properties v = new Properties();
      if (in != null) v.load(in);
      return v.getProperty("version", "unknown");
    } catch (Exception e) {
      return "unknown";
    }
  }
}
EOF
}

ensure_jars() {
  if [[ -f "$LIBS/.complete" ]]; then
    ensure_probe
    return 0
  fi
  command -v mvn >/dev/null 2>&1 || die "mvn not found: install Maven (e.g. apt-get install maven) to resolve Kafka $KAFKA_VERSION from Maven Central"
  [[ -n "$JAVAC" && -x "$JAVAC" ]] || die "javac not found: a full JDK (not only a JRE) 17+ is needed"
  mkdir -p "$KAFKA_HOME"
  log "resolving org.apache.kafka:kafka_2.13:$KAFKA_VERSION and its runtime dependencies into $LIBS (first run only)"
  write_pom
  local tmp="$KAFKA_HOME/libs.tmp.$$"
  rm -rf "$tmp"
  # shellcheck disable=SC2086
  if ! mvn -q -B $KAFKA_MVN_OPTS -f "$KAFKA_HOME/pom.xml" \
      dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp" >"$KAFKA_HOME/mvn.log" 2>&1; then
    tail -n 30 "$KAFKA_HOME/mvn.log" >&2 || true
    rm -rf "$tmp"
    die "mvn could not resolve Kafka $KAFKA_VERSION (full output: $KAFKA_HOME/mvn.log)"
  fi
  ls "$tmp"/kafka_2.13-"$KAFKA_VERSION".jar >/dev/null 2>&1 || die "kafka_2.13-$KAFKA_VERSION.jar missing after mvn (see $KAFKA_HOME/mvn.log)"
  rm -rf "$LIBS"
  mv "$tmp" "$LIBS"
  echo "$KAFKA_VERSION" >"$LIBS/.complete"
  ensure_probe
}

# ensure_probe compiles the probe when its class is missing or its source
# changed, in a scratch dir, then renames it into place, so that concurrent
# runs sharing the cache never see half a class.
ensure_probe() {
  mkdir -p "$TOOLS"
  local tmp="$TOOLS.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  write_probe "$tmp/KafkaLocalProbe.java"
  if [[ -f "$TOOLS/KafkaLocalProbe.class" ]] && cmp -s "$tmp/KafkaLocalProbe.java" "$TOOLS/KafkaLocalProbe.java"; then
    rm -rf "$tmp"
    return 0
  fi
  [[ -n "$JAVAC" && -x "$JAVAC" ]] || die "javac not found: a full JDK (not only a JRE) 17+ is needed"
  "$JAVAC" -nowarn -cp "$LIBS/*" -d "$tmp" "$tmp/KafkaLocalProbe.java" >"$KAFKA_HOME/javac.log" 2>&1 \
    || { cat "$KAFKA_HOME/javac.log" >&2; rm -rf "$tmp"; die "could not compile the readiness probe"; }
  # a rename replaces each file at once; the source last, as it marks the class current
  mv -f "$tmp"/*.class "$TOOLS/"
  mv -f "$tmp/KafkaLocalProbe.java" "$TOOLS/KafkaLocalProbe.java"
  rm -rf "$tmp"
}

# ---------------------------------------------------------------- process
# pid_of FILE prints the pid in FILE when that process runs and is a broker.
pid_of() {
  local pid
  [[ -f "$1" ]] || return 1
  pid="$(cat "$1" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # guard against a recycled pid: it must be our broker
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'kafka\.Kafka' || return 1
  echo "$pid"
}

running_pid() { pid_of "$PID_FILE"; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# proxied_port ID: the port of node ID's PROXIED listener (with --proxy-port)
proxied_port() { echo $((KAFKA_CONTROLLER_PORT + BROKERS + $1 - 1)); }

# write_props FILE NODE_ID PORT CONTROLLER_PORT VOTERS DATA_DIR writes one
# node's server.properties; replication follows the cluster's size.
write_props() {
  local listeners="PLAINTEXT://127.0.0.1:$3,CONTROLLER://127.0.0.1:$4" advertised="PLAINTEXT://127.0.0.1:$3" protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
  if [[ -n "$PROXY_PORT" ]]; then
    listeners+=",PROXIED://127.0.0.1:$(proxied_port "$2")"
    advertised+=",PROXIED://127.0.0.1:$((PROXY_PORT + $2 - 1))"
    protocols+=",PROXIED:PLAINTEXT"
  fi
  cat >"$1" <<EOF
# Generated by hookstream scripts/kafka-local.sh
process.roles=broker,controller
node.id=$2
listeners=$listeners
advertised.listeners=$advertised
listener.security.protocol.map=$protocols
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
controller.quorum.voters=$5
log.dirs=$6
num.partitions=1
default.replication.factor=$RF
min.insync.replicas=$MIN_ISR
offsets.topic.replication.factor=$RF
offsets.topic.num.partitions=$BROKERS
transaction.state.log.replication.factor=$RF
transaction.state.log.min.isr=$MIN_ISR
transaction.state.log.num.partitions=$BROKERS
share.coordinator.state.topic.replication.factor=$RF
share.coordinator.state.topic.min.isr=$MIN_ISR
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
delete.topic.enable=true
num.network.threads=2
num.io.threads=2
num.recovery.threads.per.data.dir=1
background.threads=2
log.retention.hours=1
EOF
  if ((CLUSTER)); then
    cat >>"$1" <<EOF
# A crashed node is noticed within seconds, not Kafka's default 9s and more:
# its partitions get new leaders and the survivors' ISRs shrink (so acks=all
# writes go on) well within a producer's few-second acknowledgement wait,
# even when it was the active controller.
broker.session.timeout.ms=2000
broker.heartbeat.interval.ms=400
controller.quorum.fetch.timeout.ms=1000
controller.quorum.election.timeout.ms=500
replica.lag.time.max.ms=10000
EOF
  fi
}

write_log4j() {
  cat >"$LOG4J_CONF" <<'EOF'
<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by hookstream scripts/kafka-local.sh: WARN and up to stdout, which start redirects to $KAFKA_LOG. -->
<Configuration status="WARN">
  <Appenders>
    <Console name="out" target="SYSTEM_OUT">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <!-- two INFO lines worth having: the version banner and "Kafka Server started" -->
    <Logger name="org.apache.kafka.common.utils.AppInfoParser" level="INFO" additivity="false">
      <AppenderRef ref="out"/>
    </Logger>
    <Logger name="org.apache.kafka.common.utils.internals.AppInfoParser" level="INFO" additivity="false">
      <AppenderRef ref="out"/>
    </Logger>
    <Logger name="kafka.server.KafkaRaftServer" level="INFO" additivity="false">
      <AppenderRef ref="out"/>
    </Logger>
    <Root level="WARN">
      <AppenderRef ref="out"/>
    </Root>
  </Loggers>
</Configuration>
EOF
}

write_configs() {
  write_props "$PROPS" 1 "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" "1@127.0.0.1:$KAFKA_CONTROLLER_PORT" "$KAFKA_DATA"
  write_log4j
}

# java_opts DIR sets JOPTS for a broker whose run dir is DIR.
java_opts() {
  # shellcheck disable=SC2206
  JOPTS=($KAFKA_HEAP_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
    -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true
    "-Dlog4j2.configurationFile=$LOG4J_CONF" "-Dkafka.logs.dir=$1" $KAFKA_JVM_OPTS)
}

# a random 16-byte UUID in Kafka's URL-safe base64 form (what `kafka-storage random-uuid` prints);
# like Kafka's Uuid.randomUuid, never one that starts with '-', which kafka-storage would take
# for an option
new_cluster_id() {
  local id
  id="-"
  while [[ "$id" == -* ]]; do id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"; done
  printf '%s\n' "$id"
}

# format_storage CLUSTER_ID PROPS LOG formats the log dir of PROPS; on failure
# it shows the end of LOG and returns non-zero.
format_storage() {
  if ! "$JAVA" -Xmx256m -XX:TieredStopAtLevel=1 "-Dlog4j2.configurationFile=$LOG4J_CONF" -cp "$LIBS/*" \
      kafka.tools.StorageTool format -t "$1" -c "$2" >>"$3" 2>&1; then
    tail -n 20 "$3" >&2
    return 1
  fi
}

# probe BOOTSTRAP TIMEOUT_S PIDS [MIN_NODES [NODE_ID]] runs the readiness
# probe; its report goes to PROBE_OUT, its errors to $KAFKA_RUN_DIR/probe.log.
probe() {
  local left="$2"
  ((left > 0)) || left=1
  PROBE_OUT="$("$JAVA" -Xmx128m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC "-Dlog4j2.configurationFile=$LOG4J_CONF" \
    -cp "$TOOLS:$LIBS/*" KafkaLocalProbe "$1" "$((left * 1000))" "$3" "${@:4}" 2>>"$KAFKA_RUN_DIR/probe.log")"
}

cmd_start() {
  local pid
  if pid="$(running_pid)"; then
    log "already running (pid $pid)"
    echo "$BOOTSTRAP"
    return 0
  fi
  if cluster_running; then die "a cluster of $(cat "$CLUSTER_FILE") nodes runs from $KAFKA_RUN_DIR: stop it first"; fi
  rm -f "$CLUSTER_FILE"
  need_java
  ensure_jars
  if port_open "$KAFKA_PORT"; then die "127.0.0.1:$KAFKA_PORT is already in use by another process"; fi
  if port_open "$KAFKA_CONTROLLER_PORT"; then die "127.0.0.1:$KAFKA_CONTROLLER_PORT is already in use by another process"; fi
  if [[ -n "$PROXY_PORT" ]] && port_open "$(proxied_port 1)"; then die "127.0.0.1:$(proxied_port 1) is already in use by another process"; fi

  mkdir -p "$KAFKA_RUN_DIR" "$(dirname "$KAFKA_LOG")"
  record_proxy_port
  rm -f "$PID_FILE"
  # the default data dir is throwaway: a dead broker's leftovers are not reused
  if ((DATA_IS_DEFAULT)); then rm -rf "$KAFKA_DATA"; fi
  write_configs
  java_opts "$KAFKA_RUN_DIR"
  : >"$KAFKA_LOG"
  : >"$KAFKA_RUN_DIR/probe.log"

  if [[ ! -f "$KAFKA_DATA/meta.properties" ]]; then
    format_storage "$(new_cluster_id)" "$PROPS" "$KAFKA_LOG" || die "formatting $KAFKA_DATA failed"
  fi

  nohup "$JAVA" "${JOPTS[@]}" -cp "$LIBS/*" kafka.Kafka "$PROPS" >>"$KAFKA_LOG" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$PID_FILE"
  echo "$KAFKA_VERSION" >"$KAFKA_RUN_DIR/version"

  # wait for the listener, then for a real metadata answer, all within KAFKA_START_TIMEOUT
  local deadline=$((SECONDS + KAFKA_START_TIMEOUT))
  until port_open "$KAFKA_PORT"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "broker exited during startup; last lines of $KAFKA_LOG:"
      tail -n 40 "$KAFKA_LOG" >&2
      rm -f "$PID_FILE"
      if ((DATA_IS_DEFAULT)); then rm -rf "$KAFKA_DATA"; fi
      exit 1
    fi
    if ((SECONDS >= deadline)); then start_failed "$pid" "port $KAFKA_PORT not open after ${KAFKA_START_TIMEOUT}s"; fi
    sleep 0.2
  done
  if ! probe "$BOOTSTRAP" "$((deadline - SECONDS))" "$pid"; then
    tail -n 5 "$KAFKA_RUN_DIR/probe.log" >&2 || true
    start_failed "$pid" "broker did not pass the readiness probe (metadata request) within ${KAFKA_START_TIMEOUT}s"
  fi
  local version mv
  version="$(sed -n 's/^version=//p' <<<"$PROBE_OUT")"
  mv="$(sed -n 's/^metadata_version_level=//p' <<<"$PROBE_OUT")"
  log "Kafka $version broker up (pid $pid, metadata.version level $mv, log $KAFKA_LOG, data $KAFKA_DATA)"
  echo "$BOOTSTRAP"
}

start_failed() {
  local pid="$1"
  shift
  log "$*; last lines of $KAFKA_LOG:"
  tail -n 40 "$KAFKA_LOG" >&2 || true
  stop_pid "$pid"
  rm -f "$PID_FILE"
  if ((DATA_IS_DEFAULT)); then rm -rf "$KAFKA_DATA"; fi
  exit 1
}

# stop_pids PID... sends TERM to every pid at once, then KILL to those
# still alive after KAFKA_STOP_TIMEOUT, and returns once all are gone.
stop_pids() {
  local pid waited=0 alive
  for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
  while :; do
    alive=()
    for pid in "$@"; do if kill -0 "$pid" 2>/dev/null; then alive+=("$pid"); fi; done
    ((${#alive[@]} > 0)) || break
    if ((waited >= KAFKA_STOP_TIMEOUT * 5)); then
      log "pid ${alive[*]} still alive after ${KAFKA_STOP_TIMEOUT}s, sending KILL"
      kill -KILL "${alive[@]}" 2>/dev/null || true
      break
    fi
    sleep 0.2
    waited=$((waited + 1))
  done
  # reap them if they are our own children (start_failed), otherwise just wait for them to vanish
  for pid in "$@"; do
    wait "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  done
}

stop_pid() { stop_pids "$1"; }

# record_proxy_port keeps --proxy-port for the commands after start.
record_proxy_port() {
  if [[ -n "$PROXY_PORT" ]]; then echo "$PROXY_PORT" >"$PROXY_FILE"; else rm -f "$PROXY_FILE"; fi
}

# cmd_proxies prints each node's proxy address and its PROXIED listener:
# P=<listener>,... in node order.
cmd_proxies() {
  local i out=""
  [[ -n "$PROXY_PORT" ]] || die "no PROXIED listeners: start with --proxy-port PORT"
  for ((i = 1; i <= BROKERS; i++)); do out+="${out:+,}127.0.0.1:$((PROXY_PORT + i - 1))=127.0.0.1:$(proxied_port "$i")"; done
  echo "$out"
}

cmd_stop() {
  local pid
  if pid="$(running_pid)"; then
    log "stopping broker pid $pid"
    stop_pid "$pid"
  else
    log "not running"
  fi
  rm -f "$PID_FILE" "$PROXY_FILE"
  if ((DATA_IS_DEFAULT)); then rm -rf "$KAFKA_DATA"; fi
}

cmd_status() {
  local pid
  if pid="$(running_pid)"; then
    echo "running: pid $pid, bootstrap $BOOTSTRAP, Kafka $(cat "$KAFKA_RUN_DIR/version" 2>/dev/null || echo "$KAFKA_VERSION"), log $KAFKA_LOG"
  else
    echo "not running (bootstrap would be $BOOTSTRAP)"
    return 3
  fi
}

# ---------------------------------------------------------------- cluster
node_dir() { echo "$KAFKA_RUN_DIR/node-$1"; }
node_pid_file() { echo "$KAFKA_RUN_DIR/node-$1/kafka.pid"; }
node_log() { echo "$KAFKA_RUN_DIR/node-$1/kafka.log"; }
node_port() { echo $((KAFKA_PORT + $1 - 1)); }
node_data() {
  if ((DATA_IS_DEFAULT)); then echo "$KAFKA_RUN_DIR/node-$1/data"; else echo "$KAFKA_DATA/node-$1"; fi
}

cluster_bootstrap() {
  local i out=""
  for ((i = 1; i <= BROKERS; i++)); do out+="${out:+,}127.0.0.1:$(node_port "$i")"; done
  echo "$out"
}

# cluster_running: whether a node of the cluster recorded in KAFKA_RUN_DIR runs
cluster_running() {
  local i n
  [[ -f "$CLUSTER_FILE" ]] || return 1
  n="$(cat "$CLUSTER_FILE")"
  for ((i = 1; i <= n; i++)); do
    if pid_of "$KAFKA_RUN_DIR/node-$i/kafka.pid" >/dev/null; then return 0; fi
  done
  return 1
}

# cluster_pids prints the pids of the nodes that run, one a line.
cluster_pids() {
  local i
  for ((i = 1; i <= BROKERS; i++)); do pid_of "$(node_pid_file "$i")" || true; done
}

# launch_node ID starts node ID from its server.properties, appending to its log.
launch_node() {
  local dir
  dir="$(node_dir "$1")"
  java_opts "$dir"
  nohup "$JAVA" "${JOPTS[@]}" -cp "$LIBS/*" kafka.Kafka "$dir/server.properties" >>"$(node_log "$1")" 2>&1 </dev/null &
  echo "$!" >"$(node_pid_file "$1")"
}

# await_ports DEADLINE ID... waits until the listeners of the nodes are open;
# it returns 1 when one of them exits first (NODE_FAILED names it), 2 at the deadline.
await_ports() {
  local deadline="$1" i pid
  shift
  for i in "$@"; do
    pid="$(cat "$(node_pid_file "$i")")"
    until port_open "$(node_port "$i")"; do
      if ! kill -0 "$pid" 2>/dev/null; then NODE_FAILED="$i"; return 1; fi
      if ((SECONDS >= deadline)); then NODE_FAILED="$i"; return 2; fi
      sleep 0.2
    done
  done
}

# cluster_start_failed REASON shows why, stops the nodes, drops their
# default data dirs and returns 1.
cluster_start_failed() {
  local i
  log "$*"
  for ((i = 1; i <= BROKERS; i++)); do
    log "node $i: first errors and last lines of $(node_log "$i"):"
    grep -m 3 -E ' (ERROR|FATAL) ' "$(node_log "$i")" >&2 || true
    tail -n 15 "$(node_log "$i")" >&2 || true
  done
  # shellcheck disable=SC2046
  stop_pids $(cluster_pids)
  for ((i = 1; i <= BROKERS; i++)); do
    rm -f "$(node_pid_file "$i")"
    if ((DATA_IS_DEFAULT)); then rm -rf "$(node_data "$i")"; fi
  done
  return 1
}

cmd_start_cluster() {
  local i n pid port bootstrap
  bootstrap="$(cluster_bootstrap)"
  if [[ -f "$CLUSTER_FILE" ]] && cluster_running; then
    n="$(cat "$CLUSTER_FILE")"
    [[ "$n" == "$BROKERS" ]] || die "a cluster of $n nodes runs from $KAFKA_RUN_DIR: stop it first"
    n="$(cluster_pids | wc -l)"
    ((n == BROKERS)) || die "$n of $BROKERS nodes run: start-broker the others, or stop the cluster first"
    log "already running ($BROKERS nodes, pids $(cluster_pids | paste -sd' ' -))"
    echo "$bootstrap"
    return 0
  fi
  if pid="$(running_pid)"; then die "a single broker runs from $KAFKA_RUN_DIR (pid $pid): stop it first"; fi
  need_java
  ensure_jars
  for ((i = 0; i < BROKERS; i++)); do
    for port in $((KAFKA_PORT + i)) $((KAFKA_CONTROLLER_PORT + i)) ${PROXY_PORT:+$(proxied_port $((i + 1)))}; do
      if port_open "$port"; then die "127.0.0.1:$port is already in use by another process"; fi
    done
  done
  mkdir -p "$KAFKA_RUN_DIR"
  echo "$BROKERS" >"$CLUSTER_FILE"
  record_proxy_port
  echo "$KAFKA_VERSION" >"$KAFKA_RUN_DIR/version"
  write_log4j
  # On a machine short of CPU, a node now and then dies while the three
  # start together; one more try, on fresh data dirs, gets past that.
  if ! start_cluster_once "$bootstrap"; then
    log "starting the cluster again"
    start_cluster_once "$bootstrap" || { rm -f "$CLUSTER_FILE"; exit 1; }
  fi
  echo "$bootstrap"
}

# start_cluster_once BOOTSTRAP formats the nodes' log dirs, starts the nodes
# and waits until every one of them is registered.
start_cluster_once() {
  local i pids=() voters="" cluster_id bootstrap="$1"
  : >"$KAFKA_RUN_DIR/probe.log"
  for ((i = 1; i <= BROKERS; i++)); do voters+="${voters:+,}$i@127.0.0.1:$((KAFKA_CONTROLLER_PORT + i - 1))"; done
  cluster_id="$(new_cluster_id)"
  # format the nodes side by side: each is a JVM start
  for ((i = 1; i <= BROKERS; i++)); do
    mkdir -p "$(node_dir "$i")"
    rm -f "$(node_pid_file "$i")"
    # the default data dirs are throwaway: a dead cluster's leftovers are not reused
    if ((DATA_IS_DEFAULT)); then rm -rf "$(node_data "$i")"; fi
    write_props "$(node_dir "$i")/server.properties" "$i" "$(node_port "$i")" "$((KAFKA_CONTROLLER_PORT + i - 1))" "$voters" "$(node_data "$i")"
    : >"$(node_log "$i")"
    if [[ ! -f "$(node_data "$i")/meta.properties" ]]; then
      format_storage "$cluster_id" "$(node_dir "$i")/server.properties" "$(node_log "$i")" &
      pids+=("$!")
    fi
  done
  for i in "${pids[@]}"; do
    wait "$i" || { rm -f "$CLUSTER_FILE"; die "formatting the nodes' log dirs failed"; }
  done

  pids=()
  for ((i = 1; i <= BROKERS; i++)); do
    launch_node "$i"
    pids+=("$(cat "$(node_pid_file "$i")")")
  done

  # wait for the listeners, then for every node to be registered, all within KAFKA_START_TIMEOUT
  local deadline=$((SECONDS + KAFKA_START_TIMEOUT)) rc=0 nodes=()
  for ((i = 1; i <= BROKERS; i++)); do nodes+=("$i"); done
  await_ports "$deadline" "${nodes[@]}" || rc=$?
  case "$rc" in
    1) cluster_start_failed "node $NODE_FAILED exited during startup"; return 1 ;;
    2) cluster_start_failed "node $NODE_FAILED: port $(node_port "$NODE_FAILED") not open after ${KAFKA_START_TIMEOUT}s"; return 1 ;;
  esac
  # every node's pid, so that the probe gives up as soon as any of them dies
  if ! probe "$bootstrap" "$((deadline - SECONDS))" "$(IFS=,; echo "${pids[*]}")" "$BROKERS"; then
    tail -n 5 "$KAFKA_RUN_DIR/probe.log" >&2 || true
    cluster_start_failed "the cluster did not have its $BROKERS brokers registered within ${KAFKA_START_TIMEOUT}s"
    return 1
  fi
  local version mv
  version="$(sed -n 's/^version=//p' <<<"$PROBE_OUT")"
  mv="$(sed -n 's/^metadata_version_level=//p' <<<"$PROBE_OUT")"
  log "Kafka $version cluster up: $BROKERS nodes (pids ${pids[*]}), RF $RF, min.insync.replicas $MIN_ISR, metadata.version level $mv, logs $KAFKA_RUN_DIR/node-*/kafka.log, took ${SECONDS}s"
}

cmd_stop_cluster() {
  local i pids
  pids="$(cluster_pids | paste -sd' ' -)"
  if [[ -n "$pids" ]]; then
    log "stopping $BROKERS-node cluster, pids $pids"
    # shellcheck disable=SC2086
    stop_pids $pids
  else
    log "not running"
  fi
  for ((i = 1; i <= BROKERS; i++)); do
    rm -f "$(node_pid_file "$i")"
    if ((DATA_IS_DEFAULT)); then rm -rf "$(node_data "$i")"; fi
  done
  rm -f "$CLUSTER_FILE" "$PROXY_FILE"
}

cmd_status_cluster() {
  local i pid up=0
  for ((i = 1; i <= BROKERS; i++)); do
    if pid="$(pid_of "$(node_pid_file "$i")")"; then
      echo "node $i: running, pid $pid, 127.0.0.1:$(node_port "$i"), log $(node_log "$i")"
      up=$((up + 1))
    else
      echo "node $i: down (127.0.0.1:$(node_port "$i"))"
    fi
  done
  echo "$up of $BROKERS nodes running, bootstrap $(cluster_bootstrap), Kafka $(cat "$KAFKA_RUN_DIR/version" 2>/dev/null || echo "$KAFKA_VERSION")"
  if ((up == 0)); then return 3; fi
  if ((up < BROKERS)); then return 4; fi
}

# need_node checks NODE for stop-broker and start-broker.
need_node() {
  ((CLUSTER)) || die "no cluster runs from $KAFKA_RUN_DIR (start one with: $0 start --brokers 3)"
  [[ -n "$NODE" ]] || die "which node? (1 to $BROKERS)"
  ((NODE >= 1 && NODE <= BROKERS)) || die "no node $NODE: the cluster has nodes 1 to $BROKERS"
}

# cmd_stop_broker crashes node NODE: KILL, no controlled shutdown.
cmd_stop_broker() {
  local pid
  need_node
  if ! pid="$(pid_of "$(node_pid_file "$NODE")")"; then
    log "node $NODE is not running"
    return 0
  fi
  kill -KILL "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  rm -f "$(node_pid_file "$NODE")"
  log "node $NODE killed (pid $pid, 127.0.0.1:$(node_port "$NODE")); its data stays for start-broker $NODE"
}

# cmd_start_broker starts node NODE on its data, unless it runs, and waits
# until it is registered and in the ISR of every partition it replicates.
cmd_start_broker() {
  local pid rc=0 start=$SECONDS
  need_node
  need_java
  ensure_jars
  if ! pid="$(pid_of "$(node_pid_file "$NODE")")"; then
    if port_open "$(node_port "$NODE")"; then die "127.0.0.1:$(node_port "$NODE") is already in use by another process"; fi
    printf '[%s] kafka-local: start-broker %s\n' "$(date -u '+%F %T')" "$NODE" >>"$(node_log "$NODE")"
    launch_node "$NODE"
    pid="$(cat "$(node_pid_file "$NODE")")"
  fi
  local deadline=$((SECONDS + KAFKA_START_TIMEOUT))
  await_ports "$deadline" "$NODE" || rc=$?
  if ((rc == 0)) && ! probe "$(cluster_bootstrap)" "$((deadline - SECONDS))" "$pid" 1 "$NODE"; then rc=3; fi
  case "$rc" in
    0) log "node $NODE up and in sync (pid $pid, 127.0.0.1:$(node_port "$NODE")), took $((SECONDS - start))s" ;;
    1) log "node $NODE exited during startup; last lines of $(node_log "$NODE"):"; tail -n 40 "$(node_log "$NODE")" >&2; exit 1 ;;
    2) die "node $NODE: port $(node_port "$NODE") not open after ${KAFKA_START_TIMEOUT}s (it still runs, pid $pid)" ;;
    *) tail -n 3 "$KAFKA_RUN_DIR/probe.log" >&2 || true; die "node $NODE did not rejoin within ${KAFKA_START_TIMEOUT}s (it still runs, pid $pid)" ;;
  esac
}

case "$CMD" in
  start) if ((CLUSTER)); then cmd_start_cluster; else cmd_start; fi ;;
  stop) if ((CLUSTER)); then cmd_stop_cluster; else cmd_stop; fi ;;
  status) if ((CLUSTER)); then cmd_status_cluster; else cmd_status; fi ;;
  stop-broker) cmd_stop_broker ;;
  start-broker) cmd_start_broker ;;
  proxies) cmd_proxies ;;
  fetch) need_java; ensure_jars; log "jars for Kafka $KAFKA_VERSION in $LIBS" ;;
  *)
    echo "usage: $0 start [--brokers N] [--proxy-port P]|stop|status|fetch|proxies|stop-broker N|start-broker N" >&2
    exit 2
    ;;
esac
