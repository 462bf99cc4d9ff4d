/*
 * kvs_gen_corpus: the text that kvs_gen_vocab learns its BPE merges from,
 * and the chat template generated models carry.  Both are plain data;
 * the prose was written for this project.
 */

#include "kvs_gen.h"


const char  kvs_gen_corpus[] =
    "The lighthouse keeper counted the ships every evening. There were "
    "seven on Monday, nine on Tuesday, and on Wednesday there were none at "
    "all, because the fog came down from the hills and sat on the water "
    "like a grey cat on a warm roof. She wrote the numbers in a small book "
    "with a green cover, and beside each number she drew the shape of the "
    "clouds.\n\n"
    "One morning a boy named Tom knocked on the door. He had walked from "
    "the village with a basket of bread and a letter from his mother. "
    "\"Can I see the lamp?\" he asked. The keeper smiled and took him up "
    "the stairs, one hundred and twelve of them, until they stood in the "
    "room of glass at the top of the tower.\n\n"
    "\"Why do you count the ships?\" Tom said. \"Because someone should "
    "remember them,\" she answered. \"A ship that is counted is a ship "
    "that came home.\" Tom thought about that for a long time. Then he "
    "asked if he could help, and she gave him a pencil.\n\n"
    "From that day on, the boy came every afternoon. He learned the names "
    "of the winds and the colors of the sea. He learned that a red sky in "
    "the evening meant a calm night, and that the gulls flew low before a "
    "storm. He learned to light the lamp, to clean the glass, and to wind "
    "the clock that turned the great lens around and around.\n\n"
    "In the winter the storms were strong. The waves were higher than the "
    "houses and the rain was cold and hard. One night a small boat lost "
    "its way between the rocks. Tom saw it first, a tiny light that went "
    "up and down with the water. He ran down the stairs and rang the bell, "
    "and the keeper turned the lamp toward the boat, so that the sailors "
    "could see the safe way into the harbor.\n\n"
    "The next morning the sailors came to thank them. They brought fish, "
    "apples, and a new book with a blue cover. The keeper opened it and "
    "wrote the first number on the first page: one. \"This one is yours,\" "
    "she said to Tom, and he was very proud.\n\n"
    "Years later, when Tom was grown, he became the keeper of the light. "
    "He still counts the ships every evening, and he still draws the "
    "clouds. Children from the village come to see the lamp, and he takes "
    "them up the stairs, all one hundred and twelve, and tells them the "
    "story of the boat in the storm. Numbers 0 1 2 3 4 5 6 7 8 9 10 100 "
    "2024 3.14; code: if (x == 1) { return y; } else { print(\"done\"); }\n";


const char  kvs_gen_chat_template[] =
    "{% set loop_messages = messages %}"
    "{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
