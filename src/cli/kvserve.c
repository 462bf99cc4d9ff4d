/*
 * kvserve: the command-line tool.  Dispatches to the sub-commands in
 * kvs_cli_*.c; owns only the usage text.
 */

#include <stdio.h>
#include <string.h>

#include "kvs_cli.h"


static void
kvs_cli_usage(FILE *f)
{
    fprintf(f,
        "usage: kvserve <command> [options]\n"
        "\n"
        "commands:\n"
        "  info [--json] [--kv-bytes N] [--kv-dtype f32|f16|bf16|int8|fp8]\n"
        "       [--base BASE.gguf] model.gguf\n"
        "      print metadata, tensors, hyper-parameters and the KV-cache\n"
        "      arithmetic (--json: every value, for machine comparison);\n"
        "      of a LoRA adapter, its matrices, ranks and scale, checked\n"
        "      against BASE.gguf when given\n"
        "  plan MODEL.gguf | --shape layers=L,kv_heads=H,head_dim=D[,heads=Q]\n"
        "       --memory SIZE [--kv-dtype f32|f16|bf16|fp8|int8]\n"
        "       [--context N] [--batch N] [--weights SIZE] [--block N]\n"
        "      KV capacity: bytes per token, tokens that fit, sequences\n"
        "      at a context, the longest context at a batch, with and\n"
        "      without GQA and KV quantization (docs/capacity.md)\n"
        "  gen-model [--preset tiny|small|100m] [--layers N --dim N\n"
        "            --heads N --kv-heads N --ffn N --vocab N --ctx N\n"
        "            --dtype TYPE --tied 0|1 --name S\n"
        "            --arch llama|qwen3|phi3|gemma2|gemma3\n"
        "            --head-dim N --swa N --swa-pattern N\n"
        "            --rope-base-swa F --chat-template FILE]\n"
        "            --seed N out.gguf\n"
        "      write a model of that architecture with seeded random\n"
        "      weights, a byte-level BPE vocabulary and a chat template\n"
        "      (a Llama 3 one, or FILE's text)\n"
        "      (TYPE: f32, f16, bf16, q8_0 or any quantized type kvserve\n"
        "      can make, e.g. q4_0, q4_k, iq4_xs; case-insensitive)\n"
        "  gen-lora BASE.gguf [--rank R] [--alpha A] [--strength S]\n"
        "           [--targets q,k,v,o,gate,up,down] --seed S OUT.gguf\n"
        "      write a LoRA adapter for BASE with seeded random A and B\n"
        "      (llama.cpp's GGUF adapter layout; defaults: rank 8, alpha\n"
        "      2R, strength 0.5, every target; docs/lora.md)\n"
        "  merge-lora BASE.gguf ADAPTER.gguf OUT.gguf\n"
        "      write BASE with the adapter merged, W + alpha/rank B A\n"
        "      (adapted matrices as F32)\n"
        "  quantize IN.gguf OUT.gguf --type MIX [--threads N]\n"
        "      copy a model with its weights quantized by one of the\n"
        "      usual mixes (q4_0 ... q8_0, q2_k, q3_k_s|m|l, q4_k_s|m,\n"
        "      q5_k_s|m, q6_k, iq4_nl, iq4_xs, or f32, f16, bf16;\n"
        "      docs/quantization.md) on N threads (default: every CPU)\n"
        "  tokenize [--bos] [--special] model.gguf < text\n"
        "      print the token ids of stdin on one line (default: no BOS,\n"
        "      special-token text not parsed)\n"
        "  detokenize [--special] model.gguf < ids\n"
        "      print the text of the ids on stdin (--special: show\n"
        "      control tokens)\n"
        "  convert-vocab --tiktoken tokenizer.model [--pre NAME] [--name S]\n"
        "                [--chat-template FILE] out.gguf\n"
        "  convert-vocab --hf vocab.json merges.txt [--pre NAME] [--name S]\n"
        "                [--chat-template FILE] out.gguf\n"
        "      turn a tiktoken ranks file (Llama 3) or a Hugging Face\n"
        "      byte-level BPE vocabulary (Qwen2) into a vocabulary-only\n"
        "      GGUF; --pre defaults to llama-bpe / qwen2\n"
        "  chat-template [--template NAME | --jinja FILE]\n"
        "                [--no-generation-prompt] model.gguf < messages.json\n"
        "      print the prompt the model's chat template (or NAME:\n"
        "      llama3, llama3.1, llama2, chatml, mistral, zephyr, phi3,\n"
        "      gemma; or FILE run as written) makes of OpenAI messages\n"
        "      (an array, or an object with \"messages\" and \"tools\"),\n"
        "      exactly, with no newline added\n"
        "  jinja TEMPLATE_FILE CONTEXT_JSON_FILE [--now EPOCH]\n"
        "      render a Jinja chat template with the variables of a JSON\n"
        "      object (C interpreter, as Hugging Face's jinja2 setup),\n"
        "      exactly, with no newline added; errors on stderr, status 1\n"
        "  generate model.gguf [-p TEXT] [-n NEW_TOKENS] [--temp T]\n"
        "           [--top-p P] [--top-k K] [--seed S] [--block N]\n"
        "           [--special]\n"
        "      print the prompt, then the model's continuation as it is\n"
        "      generated (defaults: -n 256 --temp 1.0 --top-p 0.9, seed\n"
        "      from the clock; --temp 0: greedy); timing on stderr\n"
        "  logits model.gguf -t \"ID ID ...\" [--block N] [--chunk N]\n"
        "         [--threads N] [--lora ADAPTER.gguf] [-o out.f32]\n"
        "      the CPU backend's logits at every position of the ids,\n"
        "      float32 little-endian [n_ids][n_vocab], to -o or stdout\n"
        "      (--chunk: prefill N ids per step; default all at once;\n"
        "      --threads: compute threads, default one per CPU;\n"
        "      --lora: under that adapter)\n"
        "  bench model.gguf [--seqs N] [--prompt P] [--gen G] [--threads T]\n"
        "        [--block B] [--kv-blocks N] [--max-batch-tokens N]\n"
        "        [--no-chunked] [--temp T] [--seed S]\n"
        "      offline load through the engine: N sequences at once;\n"
        "      prints prefill and decode tokens/s, step times, batch\n"
        "      sizes, KV use\n"
        "  engine --socket PATH model.gguf [--name NAME] [--kv-blocks N]\n"
        "         [--block B] [--threads T] [--max-batch-tokens N]\n"
        "         [--ctx N] [--parent-pid PID]\n"
        "      run the engine process in the foreground, serving nginx\n"
        "      workers on the unix socket PATH (docs/engine-process.md)\n"
        "      until SIGINT/SIGTERM\n"
        "  index-names --model M [--epoch HEX] [--adapter A] [--scope S]\n"
        "              [--block N] [--root] [ID ...]\n"
        "      the prefix index's name of every whole block of the ids\n"
        "      (arguments, or stdin), one per line in hex\n"
        "      (docs/prefix-index.md)\n"
        "  triage http://HOST[:PORT][/PATH] [--interval S] [--model NAME]\n"
        "         [--max HOP=VALUE] [--save PREFIX]\n"
        "      scrape a server's /metrics twice, S seconds apart (5),\n"
        "      and walk the hops in order: figures, thresholds, the\n"
        "      guilty hop (docs/triage.md); status 1 when one is out\n");
}


int
main(int argc, char **argv)
{
    if (argc < 2) {
        kvs_cli_usage(stderr);
        return 2;
    }

    if (strcmp(argv[1], "triage") == 0) {
        return kvs_cli_triage(argc - 1, argv + 1);
    }

    if (strcmp(argv[1], "info") == 0) {
        return kvs_cli_info(argc - 1, argv + 1);
    }

    if (strcmp(argv[1], "plan") == 0) {
        return kvs_cli_plan(argc - 1, argv + 1);
    }

    if (strcmp(argv[1], "gen-model") == 0) {
        return kvs_cli_gen_model(argc - 1, argv + 1);
    }

    if (strcmp(argv[1], "gen-lora") == 0) {
        return kvs_cli_gen_lora(argc - 1, argv + 1);
    }

    if (strcmp(argv[1], "merge-lora") == 0) {
        return kvs_cli_merge_lora(argc - 1, argv + 1);
    }

    if (strcmp(argv[1], "quantize") == 0) {
        return kvs_cli_quantize(argc - 1, argv + 1);
    }

    if (strcmp(argv[1], "tokenize") == 0) {
        return kvs_cli_tokenize(argc - 1, argv + 1);
    }

    if (strcmp(argv[1], "detokenize") == 0) {
        return kvs_cli_detokenize(argc - 1, argv + 1);
    }

    if (strcmp(argv[1], "convert-vocab") == 0) {
        return kvs_cli_convert_vocab(argc - 1, argv + 1);
    }

    if (strcmp(argv[1], "chat-template") == 0) {
        return kvs_cli_chat_template(argc - 1, argv + 1);
    }

    if (strcmp(argv[1], "jinja") == 0) {
        return kvs_cli_jinja(argc - 1, argv + 1);
    }

    if (strcmp(argv[1], "generate") == 0) {
        return kvs_cli_generate(argc - 1, argv + 1);
    }

    if (strcmp(argv[1], "logits") == 0) {
        return kvs_cli_logits(argc - 1, argv + 1);
    }

    if (strcmp(argv[1], "bench") == 0) {
        return kvs_cli_bench(argc - 1, argv + 1);
    }

    if (strcmp(argv[1], "engine") == 0) {
        return kvs_cli_engine(argc - 1, argv + 1);
    }

    if (strcmp(argv[1], "index-names") == 0) {
        return kvs_cli_index_names(argc - 1, argv + 1);
    }

    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0
        || strcmp(argv[1], "help") == 0)
    {
        kvs_cli_usage(stdout);
        return 0;
    }

    fprintf(stderr, "kvserve: unknown command \"%s\"\n\n", argv[1]);
    kvs_cli_usage(stderr);

    return 2;
}
