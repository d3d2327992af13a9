#!/usr/bin/env bash
# Resolves the Apache Kafka broker's runtime class path from Maven Central into
# jars/ beside this script (idempotent: does nothing when pom.xml is unchanged).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
stamp="$here/jars/.pom.sha256"
want="$(sha256sum "$here/pom.xml" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
rm -rf "$here/jars"
mvn -q -B -Dstyle.color=never -f "$here/pom.xml" dependency:copy-dependencies \
  -DincludeScope=runtime -DoutputDirectory="$here/jars" >&2
echo "$want" > "$stamp"
