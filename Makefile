# Two commands set everything up: `make demo` and `make test`. Both install into .venv first.
PY      ?= python3.11
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
SHARED  ?= ../shared/data
MODEL   ?= models/en-zh-tiny

.PHONY: install test lint format demo demo-train model bench clean

install: $(STAMP)

# torch is pinned first: an open range would pull a multi-GB CUDA build instead of the CPU wheel.
$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/pytest -q

lint: $(STAMP)
	$(BIN)/ruff check mtcli tests bench
	$(BIN)/ruff format --check mtcli tests bench

format: $(STAMP)
	$(BIN)/ruff format mtcli tests bench
	$(BIN)/ruff check --fix mtcli tests bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info

# ---- the shipped model: prepare Tatoeba, train the tokenizer and the model, export fp16
TATOEBA := data/tatoeba
model: $(STAMP)
	$(BIN)/mtcli data prepare tatoeba-en-zh --from $(SHARED)/tatoeba-en-zh/raw --out $(TATOEBA)
	$(BIN)/mtcli tokenizer train --src $(TATOEBA)/train.src --tgt $(TATOEBA)/train.tgt --vocab-size 6000 --out $(TATOEBA)/tok6k
	$(BIN)/mtcli train --config mtcli/presets/en-zh-tiny.toml --tokenizer $(TATOEBA)/tok6k --out runs/en-zh-tiny
	$(BIN)/mtcli export runs/en-zh-tiny/best --out $(MODEL) --fp16
