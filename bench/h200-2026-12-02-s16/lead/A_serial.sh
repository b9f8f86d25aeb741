# call A, alone on the GPU: GPT-2-XL warm start-up (issue 29), the decode step's profile and
# the generate bench (issue 30).
XL="--config andrea-120m --n-layer 48 --d-model 1600 --n-head 25 --vocab-size 4096 --batch-size 4 --data $DATA --tokenizer $DATA/tokenizer.json --steps 3 --cache-dir /tmp/mgs"
timeout 80 python3 tools/startup_time.py --runs warm warm --out $OUT/startup-xl.md \
   --title "GPT-2-XL geometry (48 x 1600, 25 heads), vocabulary 4096, token shards, warm" -- $XL > $OUT/startup-xl.log 2>&1
echo "xl warm rc $?" >> $OUT/startup-xl.log
timeout 100 python3 tools/profile_decode.py --prompt 1 --out $OUT/decode-profile.md > $OUT/decode-profile.log 2>&1
echo "profile_decode rc $?" >> $OUT/decode-profile.log
timeout 120 python3 tools/bench.py --only generate --out $OUT/generate.md > $OUT/generate.log 2>&1
echo "generate rc $?" >> $OUT/generate.log
