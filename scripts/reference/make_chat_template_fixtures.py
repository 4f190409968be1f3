#!/usr/bin/env python3
"""Chat templates rendered by transformers (its Jinja environment: render_jinja_template), the
reference for core/tokenizer/chat_template (minja).

  make_chat_template_fixtures.py --out DIR        # DIR/cases.json (tests/data/chat_ref)
  make_chat_template_fixtures.py --live TEST_EXE  # temporary folder, runs TEST_EXE
                                                  #   chatTemplatesMatchTransformers (QS_CHAT_REF_DIR)

cases.json: [{"name", "template", "bos", "eos", "messages", "add_generation_prompt",
              "expected" (the rendered text) or "error": true (the template raises)}].
Templates: SmolLM2-135M-Instruct's (as its GGUF stores it), Llama 2 chat's, Llama 3's,
Gemma 3's (the instruction-tuned checkpoints' templates).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SKIP = 77

SMOLLM2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
           "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
           "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
           "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

LLAMA2 = ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
          "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
          "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
          "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
          "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
          "{% if loop.index0 == 0 and system_message != false %}"
          "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
          "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
          "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
          "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")

LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}"
          "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim"
          " + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
          "{{ content }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

GEMMA3 = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

TEMPLATES = {
    "smollm2": (SMOLLM2, "<|im_start|>", "<|im_end|>"),
    "llama2": (LLAMA2, "<s>", "</s>"),
    "llama3": (LLAMA3, "<|begin_of_text|>", "<|eot_id|>"),
    "gemma3": (GEMMA3, "<bos>", "<eos>"),
}

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You answer in one word."}, {"role": "user", "content": "  Capital of Italy?  "}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Tell me a joke\nabout cats."}],
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],  # not alternating
    [{"role": "user", "content": "Unicode: café 日本 🦙 and {{ braces }} and {% tags %}"}],
]


def generate(out: Path):
    from transformers.utils.chat_template_utils import render_jinja_template
    cases = []
    for name, (tmpl, bos, eos) in TEMPLATES.items():
        for ci, conv in enumerate(CONVERSATIONS):
            for agp in (True, False):
                c = {"name": f"{name}/{ci}/{'gen' if agp else 'nogen'}", "template": tmpl, "bos": bos, "eos": eos,
                     "messages": conv, "add_generation_prompt": agp}
                try:
                    rendered, _ = render_jinja_template(conversations=[conv], chat_template=tmpl,
                                                        add_generation_prompt=agp, bos_token=bos, eos_token=eos)
                    c["expected"] = rendered[0]
                except Exception:  # the template's raise_exception
                    c["error"] = True
                cases.append(c)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cases.json").write_text(json.dumps(cases, ensure_ascii=False, indent=1) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--live", metavar="TEST_EXE")
    a = ap.parse_args()
    try:
        import transformers.utils.chat_template_utils  # noqa: F401
    except ImportError as e:
        print(f"SKIP: transformers not importable ({e})", file=sys.stderr)
        return SKIP
    if a.out:
        generate(Path(a.out))
        return 0
    if a.live:
        with tempfile.TemporaryDirectory() as tmp:
            generate(Path(tmp))
            env = dict(os.environ, QS_CHAT_REF_DIR=tmp)
            return subprocess.call([a.live, "chatTemplatesMatchTransformers"], env=env)
    ap.error("give --out DIR or --live TEST_EXE")


if __name__ == "__main__":
    sys.exit(main())
