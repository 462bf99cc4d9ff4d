# Chat templates as written (issue 20, point 2), on one nginx of our own:
#
# - a model whose GGUF carries a template that is none of the eight
#   named formats (DeepSeek-V3's, from $KVS_FIXTURES/templates) serves a
#   chat completion whose prompt_tokens are those of Python jinja2's
#   rendering (Hugging Face's settings, bos/eos and template read from
#   the GGUF itself) tokenized with special tokens parsed;
# - two models in one location with chat_template= of their own (a name,
#   and a Jinja template file) render differently, each as its format
#   does, and the location's kvserve_chat_template overrides the model's
#   own template but not chat_template=;
# - a template's raise_exception is a 400 invalid_request_error carrying
#   its message; content with control-token text is a 400 naming it;
# - `nginx -t` fails for a model whose template the interpreter cannot
#   compile, naming the model and the construct with its line, unless
#   the model has chat_template=; bad chat_template= values are named.
#
# Needs the kvserve tool (KVS_CLI), Python with jinja2 and gguf
# (KVS_PYTHON, default build/venv/bin/python) and the fixture template;
# skips naming what is absent.  Every process started is killed in END.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Live;
use JSON::PP ();

my $fixtures = $ENV{KVS_FIXTURES} || "$FindBin::Bin/../../shared/fixtures";
my $tpl_ds = "$fixtures/templates/deepseek-v3.jinja";
plan(skip_all => "fixture $tpl_ds is absent (set KVS_FIXTURES)")
    unless -f $tpl_ds;

my $t = Kvserve::Live->new('030', 'models');
my $root = $t->root;
my $default = $t->model_dir . "/default.gguf";
my $cli = $ENV{KVS_CLI} || $t->model_dir . "/../kvserve";
plan(skip_all => "no kvserve tool at $cli") unless -x $cli;
my $py = $ENV{KVS_PYTHON} || "$FindBin::Bin/../build/venv/bin/python";
plan(skip_all => "no Python with jinja2 and gguf at $py")
    unless -x $py && system($py, '-c', 'import jinja2, gguf') == 0;

END { $t->stop if $t }

sub write_file {
    my ($path, $data) = @_;
    open my $fh, '>:raw', $path or die "$path: $!";
    print $fh $data;
    close $fh or die "$path: $!";
}

sub run_ok {
    my ($what, $cmd) = @_;
    my $out = `$cmd 2>&1`;
    is($?, 0, $what) or diag("$cmd\n$out");
    return $out;
}

# jinja2 as Hugging Face's apply_chat_template sets it up, the template
# and bos/eos texts read from the GGUF (or the template from a file)
write_file("$root/render.py", <<'PY');
import json, sys
from datetime import datetime, timezone
from gguf import GGUFReader
from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

def field_str(r, key):
    f = r.fields[key]
    return bytes(f.parts[f.data[0]]).decode()

def token(r, key):
    f = r.fields[key]
    i = int(f.parts[f.data[0]][0])
    t = r.fields["tokenizer.ggml.tokens"]
    return bytes(t.parts[t.data[i]]).decode()

def raise_exception(m):
    raise TemplateError(m)

r = GGUFReader(sys.argv[1])
text = (open(sys.argv[3], encoding="utf-8").read() if len(sys.argv) > 3
        else field_str(r, "tokenizer.chat_template"))
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[loopcontrols])
env.filters["tojson"] = lambda x, **k: json.dumps(x, ensure_ascii=False)
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = \
    lambda f: datetime.now(timezone.utc).strftime(f)
msgs = json.load(open(sys.argv[2], encoding="utf-8"))
sys.stdout.write(env.from_string(text).render(
    messages=msgs, add_generation_prompt=True,
    bos_token=token(r, "tokenizer.ggml.bos_token_id"),
    eos_token=token(r, "tokenizer.ggml.eos_token_id")))
PY

# prompt tokens: text tokenized with special tokens parsed, no BOS added
sub n_tokens {
    my ($model, $textfile) = @_;
    my $ids = run_ok("tokenize $textfile",
                     "'$cli' tokenize --special '$model' < '$textfile'");
    my @ids = $ids =~ /(\d+)/g;
    return scalar @ids;
}

sub jinja2_tokens {
    my ($model, $msgs, $tplfile) = @_;
    write_file("$root/msgs.json", $msgs);
    run_ok("jinja2 renders for $model",
           "'$py' '$root/render.py' '$model' '$root/msgs.json' "
           . ($tplfile ? "'$tplfile' " : '') . "> '$root/prompt.txt'");
    return n_tokens($model, "$root/prompt.txt");
}

sub family_tokens {
    my ($model, $name, $msgs) = @_;
    write_file("$root/msgs.json", $msgs);
    run_ok("$name renders", "'$cli' chat-template --template $name "
           . "'$model' < '$root/msgs.json' > '$root/prompt.txt'");
    return n_tokens($model, "$root/prompt.txt");
}

# the models: the tiny one carrying DeepSeek-V3's template, one carrying
# a template the interpreter refuses, and a template file of our own
my $ds = "$root/models/ds.gguf";
run_ok('a tiny model with the DeepSeek-V3 template',
       "'$cli' gen-model --preset tiny --seed 1 --chat-template '$tpl_ds' "
       . "'$ds'");
write_file("$root/models/bad.jinja",
           "{% for m in messages %}{{ m.content }}\n{% endfor %}\n"
           . "{% include 'header.jinja' %}");
my $bad = "$root/models/bad.gguf";
run_ok('a tiny model with a template that includes a file',
       "'$cli' gen-model --preset tiny --seed 1 --chat-template "
       . "'$root/models/bad.jinja' '$bad'");
my $own = "$root/models/own.jinja";
write_file($own, "{% for m in messages %}{% if m.role == 'system' %}"
           . "{{ raise_exception('No system messages, please') }}{% endif %}"
           . "<{{ m.role }}>{{ m.content }}\n{% endfor %}"
           . "{% if add_generation_prompt %}<assistant>{% endif %}");

# ---- nginx -t ----------------------------------------------------------

my ($failed, $out) = $t->nginx_t("kvserve_model bad $bad;");
ok($failed, 'a template the interpreter cannot compile fails nginx -t');
like($out, qr/kvserve_model "bad": the model's chat template: line 3: .*include/,
     '... naming the model, the line and the construct') or diag($out);

($failed, $out) = $t->nginx_t("kvserve_model bad $bad chat_template=chatml;");
ok(!$failed, '... unless the model has chat_template=') or diag($out);

($failed, $out) = $t->nginx_t(
    "kvserve_model bad $bad chat_template=$root/models/bad.jinja;");
ok($failed, 'a chat_template= file the interpreter cannot compile fails');
like($out, qr/kvserve_model "bad": chat_template="\S*bad\.jinja": line 3: .*include/,
     '... naming the model, the file, the line and the construct')
    or diag($out);

($failed, $out) = $t->nginx_t("kvserve_model m $default chat_template=nosuch;");
ok($failed, 'an unknown chat_template= value fails nginx -t');
like($out, qr/kvserve_model "m": invalid value "nosuch" in "chat_template=": it must be one of llama3, .* or a Jinja template file: No such file/,
     '... naming the value and what it may be') or diag($out);

($failed, $out) = $t->nginx_t(
    "kvserve_model m $default chat_template=chatml chat_template=zephyr;");
ok($failed, 'chat_template= twice fails nginx -t');
like($out, qr/duplicate "chat_template" parameter/, '... saying so');

($failed, $out) = $t->nginx_t("kvserve_model m $default colour=blue;");
ok($failed, 'an unknown parameter fails nginx -t');
like($out, qr/kvserve_model "m": unknown parameter "colour=blue"/,
     '... naming it') or diag($out);

# ---- serving -------------------------------------------------------------

$t->write_conf(<<"EOC", server => <<'EOS');
    kvserve_model ds $ds;
    kvserve_model a $default chat_template=chatml;
    kvserve_model b $default chat_template=$own;
    kvserve_kv_cache 32m;
    kvserve_threads 1;
    kvserve_engine_wait 30s;
EOC
        location /v1/ { kvserve; }
        location /z/v1/ { kvserve; kvserve_chat_template zephyr; }
        location = /status { kvserve_status; }
EOS
$t->start or BAIL_OUT('nginx did not start');

# POSTs a chat request; returns (status, decoded body or undef, raw body)
sub chat {
    my ($uri, $model, $msgs) = @_;
    my $body = qq({"model":"$model","messages":$msgs,"max_tokens":1});
    my $r = $t->read_all($t->request('POST', $uri, $body), 60);
    my ($head, $b) = $t->split_response($r);
    my ($status) = $head =~ m{^HTTP/1\.1 (\d+)};
    my $j = eval { JSON::PP::decode_json($b) };
    return ($status // 0, $j, $b);
}

my $msgs = '[{"role":"system","content":"You are terse."},'
         . '{"role":"user","content":"Hello there, how are you?"},'
         . '{"role":"assistant","content":"Fine."},'
         . '{"role":"user","content":"And now?"}]';
my $user = '[{"role":"user","content":"Hello there, how are you?"}]';

my $want = jinja2_tokens($ds, $msgs);
my $as_llama3 = family_tokens($ds, 'llama3', $msgs);
isnt($want, $as_llama3,
     "jinja2's DeepSeek-V3 prompt ($want tokens) is not the llama3 one");

my ($status, $j, $raw) = chat('/v1/chat/completions', 'ds', $msgs);
is($status, 200, 'the DeepSeek-V3 model serves a chat completion')
    or diag($raw);
is($j && $j->{usage}{prompt_tokens}, $want,
   '... with the prompt tokens of jinja2\'s rendering');

# the location's format overrides the model's own template
($status, $j, $raw) = chat('/z/v1/chat/completions', 'ds', $msgs);
is($status, 200, 'kvserve_chat_template zephyr in another location')
    or diag($raw);
is($j && $j->{usage}{prompt_tokens}, family_tokens($ds, 'zephyr', $msgs),
   '... renders zephyr there');

# two models in one location, each with its chat_template=
my $want_a = family_tokens($default, 'chatml', $user);
my $want_b = jinja2_tokens($default, $user, $own);
isnt($want_a, $want_b, "chatml ($want_a) and the file ($want_b) differ");

($status, $j, $raw) = chat('/v1/chat/completions', 'a', $user);
is($status, 200, 'model a (chat_template=chatml)') or diag($raw);
is($j && $j->{usage}{prompt_tokens}, $want_a, '... renders chatml');

($status, $j, $raw) = chat('/v1/chat/completions', 'b', $user);
is($status, 200, 'model b (chat_template=FILE)') or diag($raw);
is($j && $j->{usage}{prompt_tokens}, $want_b, '... renders the file');

# chat_template= is not overridden by the location's format
($status, $j, $raw) = chat('/z/v1/chat/completions', 'a', $user);
is($j && $j->{usage}{prompt_tokens}, $want_a,
   'chat_template= wins over the location\'s kvserve_chat_template');

# raise_exception: a 400 carrying the template's message
($status, $j, $raw) = chat('/v1/chat/completions', 'b', $msgs);
is($status, 400, 'a template\'s raise_exception is a 400');
is($j && $j->{error}{type}, 'invalid_request_error',
   '... an invalid_request_error') or diag($raw);
like($j && $j->{error}{message}, qr/No system messages, please/,
     '... carrying the template\'s message');

# control-token text in content cannot be kept as plain text
($status, $j, $raw) = chat('/v1/chat/completions', 'ds',
    '[{"role":"user","content":"hi <|eot_id|> there"}]');
is($status, 400, 'content holding control-token text is a 400');
like($j && $j->{error}{message}, qr/control token text '<\|eot_id\|>'/,
     '... naming the token') or diag($raw);
is($j && $j->{error}{param}, 'messages[0].content', '... and the field');

# the server still answers
($status, $j, $raw) = chat('/v1/chat/completions', 'ds', $user);
is($status, 200, 'and the model still serves') or diag($raw);

done_testing();
