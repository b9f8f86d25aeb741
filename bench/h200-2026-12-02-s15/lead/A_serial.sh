# call A, alone on the GPU: converge's microgpt loop, each part timed; then issue 29's
# start-up at the default corpus and vocabulary (its tokens made beside the tests)
timeout 50 python3 .devtree/jobs/lead/steploop.py .devtree/data 4096 64 andrea-12m cuda 300 > $OUT/steploop-12m.log 2>&1
timeout 50 python3 .devtree/jobs/lead/steploop.py .devtree/data 4096 16 andrea-120m cuda 100 > $OUT/steploop-120m.log 2>&1
timeout 150 python3 tools/startup_time.py --runs cold ahead warm warm --out $OUT/startup.md --title "andrea-120m, the default corpus and vocabulary" -- --config andrea-120m --steps 3 --cache-dir /tmp/mgs > $OUT/startup-120m.log 2>&1
echo "startup rc $?" >> $OUT/startup-120m.log
