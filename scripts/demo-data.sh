#!/bin/sh
# Loads the make-run demo: one channel of each implemented platform and one member each,
# pointing at the simulator given as $1.
set -eu
sim=$1
ctl="$(cd "$(dirname "$0")/.." && pwd)/build/bin/botgatectl"
now=$(date +%s)000

channel() { # id type info-json
  printf '{"_id":"%s","app":"demo","type":"%s","on":true,"name":"demo %s","info":%s,"createdAt":%s,"updatedAt":%s}' \
    "$1" "$2" "$2" "$3" "$now" "$now" | "$ctl" channel put -
}
member() { # id channel externalId platform
  printf '{"_id":"%s","channel":"%s","app":"demo","externalId":"%s","platform":"%s","firstName":"Demo","lastName":"User","locale":"en","customLocale":null,"tags":[],"meta":{},"botMeta":{"tree":null,"nodeCompositeId":null,"liveChat":false,"subscribed":true,"tempData":{}},"createdAt":%s,"updatedAt":%s}' \
    "$1" "$2" "$3" "$4" "$now" "$now" | "$ctl" member put -
}

channel demo-facebook facebook '{"accessToken":"demo-page-token","pageId":"100200300"}'
member demo-fb-member demo-facebook psid-demo-1 facebook
channel demo-whatsapp whatsapp "{\"apiPath\":\"$sim/wa\",\"adminUsername\":\"admin\",\"adminPassword\":\"demo-password\",\"waId\":\"85200000001\"}"
member demo-wa-member demo-whatsapp 85291234567 whatsapp
channel demo-whatsapp-cloud whatsapp-cloud '{"accessToken":"demo-cloud-token","phoneNumberId":"1055550001","wabaId":"2001"}'
member demo-cloud-member demo-whatsapp-cloud 85291234568 whatsapp-cloud
