#!/usr/bin/env python3
"""Renders vt's Jinja test cases with Python jinja2, set up exactly as HF transformers'
apply_chat_template does (utils/chat_template_utils.py, _compile_jinja_template), and writes the
expected outputs that tests/jinja/test_against_jinja2.cpp compares vt's rendering with.

Cases come from two places:
  engine_cases.json   small templates, each exercising one Jinja feature, with variables;
  chat templates      the real ones under .cache/chat_templates/<name>/ (scripts/fetch-chat-templates.sh)
                      and vt's own test templates in tests/jinja/templates/, each rendered for
                      every conversation in conversations.json.
Usage: render_with_jinja2.py REPO_ROOT OUTPUT.json
"""
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTag(jinja2.ext.Extension):
    """HF's AssistantTracker parses {% generation %}...{% endgeneration %}; rendering is unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    environment.filters["tojson"] = tojson
    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = strftime_now
    return environment


ENVIRONMENT = make_environment()
COMPILED = {}  # compiling is the slow part; each chat template renders for many conversations


def render(template_text, variables):
    """{'output': text} or {'error': kind, 'message': text}; kind 'raised' is raise_exception."""
    try:
        if template_text not in COMPILED:
            COMPILED[template_text] = ENVIRONMENT.from_string(template_text)
        template = COMPILED[template_text]
    except jinja2.exceptions.TemplateSyntaxError as error:
        return {"error": "syntax", "message": str(error)}
    except Exception as error:  # TemplateAssertionError (unknown filter) and friends
        return {"error": "syntax", "message": f"{type(error).__name__}: {error}"}
    try:
        return {"output": template.render(**variables)}
    except jinja2.exceptions.TemplateError as error:
        if type(error) is jinja2.exceptions.TemplateError:
            return {"error": "raised", "message": error.message}
        return {"error": "render", "message": f"{type(error).__name__}: {error}"}
    except Exception as error:
        return {"error": "render", "message": f"{type(error).__name__}: {error}"}


def load_real_templates(root):
    """(name, template text, special tokens) for each fetched real template."""
    cache = os.path.join(root, ".cache", "chat_templates")
    found = []
    if not os.path.isdir(cache):
        return found
    for name in sorted(os.listdir(cache)):
        folder = os.path.join(cache, name)
        special = {}
        text = None
        config_path = os.path.join(folder, "tokenizer_config.json")
        if os.path.exists(config_path):
            with open(config_path, encoding="utf-8") as handle:
                config = json.load(handle)
            for key in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
                value = config.get(key)
                if isinstance(value, dict):
                    value = value.get("content")
                if isinstance(value, str):
                    special[key] = value
            text = config.get("chat_template")
        jinja_path = os.path.join(folder, "chat_template.jinja")
        if os.path.exists(jinja_path):
            with open(jinja_path, encoding="utf-8") as handle:
                text = handle.read()
        if isinstance(text, str):
            found.append((name, text, special))
    return found


def main():
    root, output_path = sys.argv[1], sys.argv[2]
    here = os.path.join(root, "tests", "jinja")
    cases = []

    with open(os.path.join(here, "engine_cases.json"), encoding="utf-8") as handle:
        for case in json.load(handle):
            result = render(case["template"], case.get("variables", {}))
            cases.append({"id": "engine/" + case["id"], "template": case["template"],
                          "variables": case.get("variables", {}), **result})

    templates = [(f"real/{name}", text, special) for name, text, special in load_real_templates(root)]
    own = os.path.join(here, "templates")
    for file in sorted(os.listdir(own)):
        if file.endswith(".jinja"):
            with open(os.path.join(own, file), encoding="utf-8") as handle:
                templates.append((f"vt_test/{file[:-6]}", handle.read(), {"bos_token": "<s>", "eos_token": "</s>"}))

    with open(os.path.join(here, "conversations.json"), encoding="utf-8") as handle:
        conversations = json.load(handle)
    for template_name, text, special in templates:
        for conversation in conversations:
            request = {
                "messages": conversation["messages"],
                "tools": conversation.get("tools"),
                "add_generation_prompt": conversation.get("add_generation_prompt", False),
                "extra": {},
            }
            if "enable_thinking" in conversation:
                request["extra"]["enable_thinking"] = conversation["enable_thinking"]
            # As apply_chat_template: special tokens, then kwargs, then the named arguments.
            variables = {**special, **request["extra"], "messages": request["messages"], "tools": request["tools"],
                         "documents": None, "add_generation_prompt": request["add_generation_prompt"]}
            result = render(text, variables)
            cases.append({"id": f"{template_name}/{conversation['id']}", "template": text,
                          "special_tokens": special, "request": request, **result})

    with open(output_path, "w", encoding="utf-8") as handle:
        json.dump({"jinja2_version": jinja2.__version__, "real_templates": [t[0] for t in templates if t[0].startswith("real/")],
                   "cases": cases}, handle, ensure_ascii=False, indent=1)
    print(f"jinja2 {jinja2.__version__}: {len(cases)} cases, real templates: "
          f"{', '.join(t[0][5:] for t in templates if t[0].startswith('real/')) or 'none'}")


if __name__ == "__main__":
    main()
