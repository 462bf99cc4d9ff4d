# The prefix cache through nginx (issue 6), on one nginx of our own:
#
# 1. a 10-turn conversation: each prompt is the previous prompt, the
#    previous reply and a new user message (token ids, so that nothing
#    is re-tokenized); usage.prompt_tokens_details.cached_tokens grows
#    every turn to at least (previous prompt + previous reply) rounded
#    down to a block (16 tokens);
#    the same through chat, the reply rendered back as text;
# 2. one token changed early in the conversation drops the hit to the
#    tokens before it, exactly (the block it falls in is shared in part
#    and copied);
# 3. a reload with a different model file under the same name (renamed
#    over the same path, same size, same mtime second) gets zero hits
#    and the new weights' answers: the cold answer, which a second,
#    cached run repeats, and not the old weights' answer.
#
# Every nginx and engine process started here is killed in END.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Live;
use File::Copy ();
use JSON::PP ();

my $t = Kvserve::Live->new('015', 'models');
my $root = $t->root;
my $path = "$root/models/m.gguf";
my $bt = 16;

# the tiny default model: 512 ids, its end tokens 507, 508, 511
File::Copy::copy($t->model_dir . "/default.gguf", $path) or die "copy: $!";

$t->write_conf(<<"EOC");
    kvserve_model m $path;
    kvserve_kv_cache 64m;
    kvserve_kv_block $bt;
    kvserve_threads 1;
    kvserve_engine_wait 20s;
EOC

END { $t->stop if $t }

ok($t->start, 'nginx started');

my $json = JSON::PP->new->canonical;

# POSTs $req to $uri; returns the decoded body (undef on a non-200)
sub post {
    my ($uri, $req) = @_;
    my $r = $t->read_all($t->request('POST', $uri, $json->encode($req)), 60);
    my ($head, $body) = $t->split_response($r);
    unless ($head =~ m{^HTTP/1\.1 200 }) {
        diag("got: $head\n$body");
        return undef;
    }
    return $json->decode($body);
}

sub complete { post('/v1/completions', @_) }
sub chat { post('/v1/chat/completions', @_) }

sub cached {
    my ($res) = @_;
    return $res->{usage}{prompt_tokens_details}{cached_tokens} // -1;
}

my $seed = 12345;
sub ids {
    my ($n) = @_;
    my @v;
    for (1 .. $n) {
        $seed = ($seed * 1103515245 + 12345) % 2147483648;
        push @v, 100 + $seed % 300;
    }
    return @v;
}

# --- 1. ten turns ------------------------------------------------------------

my @conv;
my ($prev_total, $prev_cached) = (0, -1);

for my $turn (0 .. 9) {
    push @conv, ids(11 + $turn);

    # the reply is one token repeated (its id known, so the next prompt
    # holds exactly what was generated)
    my $tok = 200 + $turn;
    my $k = 9 + 2 * $turn;
    my $res = complete({ model => 'm', prompt => [@conv], max_tokens => $k,
                         temperature => 0, logit_bias => { $tok => 100 } });
    ok($res, "turn $turn answered") or last;

    is($res->{usage}{prompt_tokens}, scalar @conv,
       "turn $turn: prompt_tokens");
    is($res->{usage}{completion_tokens}, $k, "turn $turn: completion_tokens");

    my $c = cached($res);
    my $want = int($prev_total / $bt) * $bt;
    if ($turn == 0) {
        is($c, 0, 'turn 0: nothing cached');
    } else {
        cmp_ok($c, '>=', $want,
               "turn $turn: cached_tokens $c >= $want (previous prompt + "
               . "reply, whole blocks)");
        cmp_ok($c, '>', $prev_cached, "turn $turn: more than last turn");
    }
    cmp_ok($c, '<', scalar @conv, "turn $turn: the last token is computed");

    $prev_cached = $c;
    push @conv, ($tok) x $k;
    $prev_total = scalar @conv;
}

# --- 1b. the same through chat ----------------------------------------------
#
# Each reply is rendered back into the next prompt as text and tokenized
# again, so it must come back as the same ids: the reply is one letter
# repeated (byte-level ids 65..90 are 'A'..'Z'), the first letter whose
# repetition the tokenizer does not merge (checked here on its own).

my ($letter, $lid);
for my $c (split //, 'QZXJKVWY') {
    my $r12 = complete({ model => 'm', prompt => $c x 12, max_tokens => 1 });
    my $r6 = complete({ model => 'm', prompt => $c x 6, max_tokens => 1 });
    if ($r12 && $r6
        && $r12->{usage}{prompt_tokens} - $r6->{usage}{prompt_tokens} == 6)
    {
        ($letter, $lid) = ($c, ord $c);
        last;
    }
}
ok($letter, "a letter whose repetition stays one token per letter: "
   . ($letter // 'none'));

my @msgs = ({ role => 'system', content => 'Be brief.' });
($prev_total, $prev_cached) = (0, -1);

for my $turn (0 .. 9) {
    last unless $letter;
    push @msgs, { role => 'user', content => "Turn $turn: more." };
    my $k = 5 + $turn;
    my $res = chat({ model => 'm', messages => [@msgs], max_tokens => $k,
                     temperature => 0, logit_bias => { $lid => 100 } });
    ok($res, "chat turn $turn answered") or last;
    my $reply = $res->{choices}[0]{message}{content};
    is($reply, $letter x $k, "chat turn $turn: the reply");

    my $c = cached($res);
    my $want = int($prev_total / $bt) * $bt;
    if ($turn > 0) {
        cmp_ok($c, '>=', $want,
               "chat turn $turn: cached_tokens $c >= $want");
        cmp_ok($c, '>', $prev_cached, "chat turn $turn: more than before");
    }

    $prev_cached = $c;
    $prev_total = $res->{usage}{prompt_tokens} + $k;
    push @msgs, { role => 'assistant', content => $reply };
}

# --- 2. one token changed early ---------------------------------------------

my @edit = @conv;
$edit[37] = $edit[37] == 150 ? 151 : 150;
my $res = complete({ model => 'm', prompt => [@edit], max_tokens => 4,
                     temperature => 0 });
is(cached($res), 37, 'a change at token 37 drops the hit to 37 tokens');

$res = complete({ model => 'm', prompt => [@edit], max_tokens => 4,
                  temperature => 0 });
is(cached($res), scalar(@edit) - 1, '... and the edited prompt hits after');

# --- 3. another file under the same name ------------------------------------

my $bias = { 507 => -100, 508 => -100, 511 => -100 };
my @p = @conv[0 .. 60];
my $old = complete({ model => 'm', prompt => [@p], max_tokens => 24,
                     temperature => 0, logit_bias => $bias });
ok($old, 'old weights: answered');
my $old2 = complete({ model => 'm', prompt => [@p], max_tokens => 24,
                      temperature => 0, logit_bias => $bias });
is(cached($old2), 60, 'old weights: the prompt is cached');
is($old2->{choices}[0]{text}, $old->{choices}[0]{text},
   'old weights: cached answer = cold answer');

# other weights in a file of the same size and the same mtime second,
# renamed over the same path: 8 KiB of tensor data (F32, from the middle
# of the file) set to 0.05
my $pid1 = $t->engine_pid();
my $mtime = (stat $path)[9];
my $m2 = "$root/models/m2.gguf";
File::Copy::copy($path, $m2) or die "copy: $!";
open my $fh, '+<', $m2 or die "open: $!";
binmode $fh;
seek $fh, int((-s $m2) / 8) * 4, 0 or die "seek: $!";
print $fh pack('f<*', (0.05) x 2048) or die "write: $!";
close $fh or die "close: $!";
is(-s $m2, -s $path, 'the new file has the same size');
utime $mtime, $mtime, $m2 or die "utime: $!";
rename $m2, $path or die "rename: $!";

kill 'HUP', $t->master_pid();
ok($t->wait_for(sub { $t->log_count(qr/gracefully shutting down/) >= 2 },
                20),
   'reload: the old workers are shutting down');

my $new = complete({ model => 'm', prompt => [@p], max_tokens => 24,
                     temperature => 0, logit_bias => $bias });
ok($new, 'new weights: answered');
is(cached($new), 0, 'new weights: zero hits');
my $pid2 = $t->engine_pid();
ok($pid2 && $pid2 != $pid1, "a new engine ($pid2) serves the new file");
isnt($new->{choices}[0]{text}, $old->{choices}[0]{text},
     'new weights: another answer than the old weights');

my $new2 = complete({ model => 'm', prompt => [@p], max_tokens => 24,
                      temperature => 0, logit_bias => $bias });
is(cached($new2), 60, 'new weights: then cached');
is($new2->{choices}[0]{text}, $new->{choices}[0]{text},
   'new weights: cached answer = cold answer');

done_testing();
