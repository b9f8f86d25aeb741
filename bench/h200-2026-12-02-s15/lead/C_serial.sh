# call C, alone on the GPU: issue 29's start-up figures. The default corpus's tokens
# (BPE at 50,304: the first run's data cost) first, then the trainer's runs.
D=$PWD/.devtree/data
python3 -c "
import time; t=time.perf_counter()
from microgpt.data import load_tokens
load_tokens(None, None, 50304, '/tmp/mgs'); print('tokens for the default corpus at 50304:', round(time.perf_counter()-t,1), 's')" > $OUT/tokens50304.log 2>&1
timeout 110 python3 tools/startup_time.py --runs cold ahead warm warm --out $OUT/startup.md --title "andrea-120m, the default corpus and vocabulary" -- --config andrea-120m --steps 3 --cache-dir /tmp/mgs > $OUT/startup-120m.log 2>&1
echo "startup rc $?" >> $OUT/startup-120m.log
timeout 100 python3 tools/startup_time.py --runs cold warm --out $OUT/startup.md --title "GPT-2-XL geometry (48 x 1600, 25 heads), vocabulary 4096, token shards" -- --config andrea-120m --n-layer 48 --d-model 1600 --n-head 25 --vocab-size 4096 --batch-size 4 --data $D --tokenizer $D/tokenizer.json --steps 3 --cache-dir /tmp/mgs > $OUT/startup-xl.log 2>&1
echo "startup rc $?" >> $OUT/startup-xl.log
