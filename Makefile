# Two commands set everything up: `make demo` and `make test`. Both install into .venv first.
PY      ?= python3.11
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
SHARED  ?= ../shared/data
MODEL   ?= models/en-zh-tiny

.PHONY: install test e2e lint format demo demo-train model model-zh-en model-student bench clean font

install: $(STAMP)

# torch is pinned first: an open range would pull a multi-GB CUDA build instead of the CPU wheel.
$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,serve]'
	touch $(STAMP)

# mtcli's bytecode first: the suite starts ~200 `mtcli` processes, and where PYTHONDONTWRITEBYTECODE
# is set (this project's machines) each one compiled the sources again (0.16 s a start, 0.11 with it).
# Two workers: most tests wait on one Python thread, so a second core nearly halves the suite.
test: $(STAMP)
	$(BIN)/python -m compileall -q mtcli
	$(BIN)/pytest -q -n 2

# the web page in headless Chromium (Debian: apt-get install chromium chromium-driver)
e2e: $(VENV)/.e2e
	$(BIN)/python -m compileall -q mtcli
	$(BIN)/pytest -q -m e2e tests/e2e -s

$(VENV)/.e2e: $(STAMP)
	$(BIN)/pip install -q -e '.[dev,serve,e2e]'
	touch $@

lint: $(STAMP)
	$(BIN)/ruff check mtcli tests bench
	$(BIN)/ruff format --check mtcli tests bench

format: $(STAMP)
	$(BIN)/ruff format mtcli tests bench
	$(BIN)/ruff check --fix mtcli tests bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info

# ---- the shipped models: prepare Tatoeba, train the joint tokenizer and a model, then export
# the mean of the last checkpoints in fp16 (3 for en-zh, 5 for zh-en: the better on the
# validation set; bf16, under 90 minutes each on 2 idle CPU cores); then the placeholder stage:
# that mean, its vocabulary extended with the placeholder pieces, trained 3,000 steps more with
# the placeholder pipeline (training/augment.py; ~25 minutes), and the mean of its last 3
# checkpoints goes beside the model card. Running the same target again continues a killed run.
TATOEBA   := data/tatoeba
TOKENIZER := data/tok6k
TOKENIZER_PH := data/tok6k-ph

$(TOKENIZER)/tokenizer.json: | $(TATOEBA)/test.src
	$(BIN)/mtcli tokenizer train --src $(TATOEBA)/train.src --tgt $(TATOEBA)/train.tgt --vocab-size 6000 --out $(TOKENIZER)

model: $(STAMP) $(TOKENIZER)/tokenizer.json
	$(BIN)/mtcli train --config mtcli/training/presets/en-zh-tiny.toml --tokenizer $(TOKENIZER) --out runs/en-zh-tiny
	$(BIN)/mtcli export $$(ls -d runs/en-zh-tiny/step-* | sort -V | tail -3) --out runs/en-zh-tiny/avg3 --fp16
	test -f $(TOKENIZER_PH)/tokenizer.json || $(BIN)/mtcli tokenizer add-placeholders runs/en-zh-tiny/avg3 --out $(TOKENIZER_PH)
	$(BIN)/mtcli train --config mtcli/training/presets/en-zh-tiny-placeholders.toml --out runs/en-zh-tiny-ph
	$(BIN)/mtcli export $$(ls -d runs/en-zh-tiny-ph/step-* | sort -V | tail -3) --out runs/en-zh-tiny-ph/avg3 --fp16
	mkdir -p models/en-zh-tiny && cp runs/en-zh-tiny-ph/avg3/* models/en-zh-tiny/

model-zh-en: $(STAMP) $(TOKENIZER)/tokenizer.json
	$(BIN)/mtcli train --config mtcli/training/presets/zh-en-tiny.toml --tokenizer $(TOKENIZER) --out runs/zh-en-tiny
	$(BIN)/mtcli export $$(ls -d runs/zh-en-tiny/step-* | sort -V | tail -5) --out runs/zh-en-tiny/avg5 --fp16
	test -f $(TOKENIZER_PH)/tokenizer.json || $(BIN)/mtcli tokenizer add-placeholders runs/zh-en-tiny/avg5 --out $(TOKENIZER_PH)
	$(BIN)/mtcli train --config mtcli/training/presets/zh-en-tiny-placeholders.toml --out runs/zh-en-tiny-ph
	$(BIN)/mtcli export $$(ls -d runs/zh-en-tiny-ph/step-* | sort -V | tail -3) --out runs/zh-en-tiny-ph/avg3 --fp16
	mkdir -p models/zh-en-tiny && cp runs/zh-en-tiny-ph/avg3/* models/zh-en-tiny/

# ---- the distilled students: each teacher's beam-5 translations of the training sources and of
# the other teacher's translations of the training targets (new sentences, where the teacher's
# outputs are not its memorised references; none that is a validation or test sentence), then a
# 3+2-layer student started from the teacher's layers and trained on them (`mtcli distill`;
# 40-55 minutes each on 2 cores). The en-zh student ships, decoded at beam 3 with int8 by
# default (about 2.1-2.2x en-zh-tiny's speed at beam 5, 0.76 BLEU below it); the zh-en one stays in
# runs/ (not within 1 BLEU at 2x: README, "The shipped models")
KD := runs/kd
$(KD)/en.sources $(KD)/zh.sources: | $(TATOEBA)/test.src $(STAMP)
	mkdir -p $(KD)
	$(BIN)/mtcli translate -q -m models/zh-en-tiny -i $(TATOEBA)/train.tgt -o $(KD)/en.synthetic --force
	$(BIN)/mtcli translate -q -m models/en-zh-tiny -i $(TATOEBA)/train.src -o $(KD)/zh.synthetic --force
	cat $(TATOEBA)/valid.src $(TATOEBA)/test.src > $(KD)/en.held
	cat $(TATOEBA)/valid.tgt $(TATOEBA)/test.tgt > $(KD)/zh.held
	awk 'FNR==NR {held[$$0]; next} !($$0 in held) && !seen[$$0]++' $(KD)/en.held $(TATOEBA)/train.src $(KD)/en.synthetic > $(KD)/en.sources
	awk 'FNR==NR {held[$$0]; next} !($$0 in held) && !seen[$$0]++' $(KD)/zh.held $(TATOEBA)/train.tgt $(KD)/zh.synthetic > $(KD)/zh.sources

model-student: $(STAMP) $(KD)/en.sources
	$(BIN)/mtcli distill --teacher models/en-zh-tiny --src $(KD)/en.sources --config mtcli/training/presets/en-zh-student.toml --out runs/en-zh-student \
		--student-beam 2 --quantize int8
	mkdir -p models/en-zh-tiny-student && cp runs/en-zh-student/model/* models/en-zh-tiny-student/
	$(BIN)/mtcli distill --teacher models/zh-en-tiny --src $(KD)/zh.sources --config mtcli/training/presets/zh-en-student.toml --out runs/zh-en-student

# ---- demo: the shipped model translates a few sentences, then its scores on 200 test lines
DEMO_SENTENCES := "Why do we work?" "I would like a cup of coffee." "Where is the train station?" \
	"My brother plays the piano every evening." "It is raining, so we stay at home." \
	"我们为什么工作？" "我不能收这份礼。"

# the raw corpus from $(SHARED) where this machine has it, else downloaded into mtcli's cache
RAW := $(wildcard $(SHARED)/tatoeba-en-zh/raw)
$(TATOEBA)/test.src: | $(STAMP)
	$(BIN)/mtcli data prepare tatoeba-en-zh $(if $(RAW),--from $(RAW)) --out $(TATOEBA)

# the demo lines sit beside the prepared corpus, not in it: data prepare owns that folder
DEMO := data/demo
$(DEMO).src: $(TATOEBA)/test.src
	head -n 200 $(TATOEBA)/test.src > $(DEMO).src
	head -n 200 $(TATOEBA)/test.tgt > $(DEMO).tgt

demo: $(STAMP) $(DEMO).src
	@printf '%s\n' $(DEMO_SENTENCES) | $(BIN)/mtcli translate --format tsv
	$(BIN)/mtcli eval --src $(DEMO).src --ref $(DEMO).tgt --metrics bleu,chrf

# ---- demo-train: a small model from scratch in about 5 minutes, with progress bars
demo-train: $(STAMP) $(DEMO).src
	$(BIN)/mtcli tokenizer train --src $(TATOEBA)/train.src --tgt $(TATOEBA)/train.tgt --vocab-size 4000 --out runs/demo/tokenizer
	$(BIN)/mtcli train --config mtcli/training/presets/en-zh-tiny.toml --tokenizer runs/demo/tokenizer --out runs/demo --restart \
		--max-time 5 --bpe-dropout 0 --warmup 300 --lr-factor 0.5 --dropout 0.1 --valid-every 200 --valid-bleu-lines 200 --d-model 128 --d-ff 512
	$(BIN)/mtcli eval -m runs/demo/best --src $(DEMO).src --ref $(DEMO).tgt --metrics bleu,chrf
	$(BIN)/mtcli translate -m runs/demo/best "Why do we work?"

# ---- the CJK font `attention --png` falls back on: Droid Sans Fallback (Apache-2.0, Debian's
# fonts-droid-fallback) cut to GB2312's Hanzi and the shipped vocabularies' (mtcli/cli/fonts/SOURCE.md)
DROID := /usr/share/fonts/truetype/droid/DroidSansFallbackFull.ttf
font: $(STAMP)
	test -f $(DROID) || (apt-get update -qq && apt-get install -y -qq fonts-droid-fallback)
	$(BIN)/python mtcli/cli/fonts/make_subset.py $(DROID)

# ---- benchmarks: JSON in bench/results/, a table on stdout
bench: $(STAMP)
	$(BIN)/pip install -q -e '.[dev,serve,ct2]'
	$(BIN)/python bench/run.py
