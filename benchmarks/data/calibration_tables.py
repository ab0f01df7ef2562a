"""Hand-written tables of the shipped calibration set (read by build_calibration_set.py).

Every real fact below was written from general knowledge and is meant to be plainly and
uncontroversially true; facts with a disputed or changing answer (contested inventions,
countries with several capitals or no official language, the longest river, the most
populous country) were left out on purpose.

Row format of the fact tables: ``subject | answer | difficulty | aliases (; separated) | decoy``.
``difficulty``: 1 = even a ~100M-parameter model should know it, 2 = a mid-sized model,
3 = only large models. ``decoy`` (optional) is the counterfactual answer a knowledge-conflict
context states; without it a same-category answer of another fact is drawn.
"""

from __future__ import annotations

# ---------------------------------------------------------------------------------------
# Subject-templated categories: (query, paraphrases, contexts, rows)
# {s} = subject, {S} = subject with a capital first letter, {a} = answer, {A} = capitalised answer
# ---------------------------------------------------------------------------------------

CAPITAL = """
France | Paris | 1 | | Lyon
Japan | Tokyo | 1 | | Osaka
Italy | Rome | 1 | | Milan
Germany | Berlin | 1 | | Munich
Spain | Madrid | 1 | | Barcelona
the United Kingdom | London | 1 | | Manchester
Russia | Moscow | 1 | | Saint Petersburg
China | Beijing | 1 | Peking | Shanghai
Egypt | Cairo | 1 | | Alexandria
Greece | Athens | 1 | | Thessaloniki
Mexico | Mexico City | 1 | | Guadalajara
Argentina | Buenos Aires | 1 | | Rosario
Ireland | Dublin | 1 | | Cork
Norway | Oslo | 1 | | Bergen
Sweden | Stockholm | 1 | | Gothenburg
the Netherlands | Amsterdam | 1 | | Rotterdam
Portugal | Lisbon | 1 | | Porto
Austria | Vienna | 1 | | Salzburg
Poland | Warsaw | 1 | | Krakow
Hungary | Budapest | 1 | | Debrecen
the Czech Republic | Prague | 1 | | Brno
Thailand | Bangkok | 1 | | Chiang Mai
South Korea | Seoul | 1 | | Busan
India | New Delhi | 1 | Delhi | Mumbai
Kenya | Nairobi | 1 | | Mombasa
Peru | Lima | 1 | | Arequipa
Cuba | Havana | 1 | | Camaguey
Denmark | Copenhagen | 1 | | Aarhus
Finland | Helsinki | 1 | | Tampere
Belgium | Brussels | 1 | | Antwerp
Iran | Tehran | 1 | | Isfahan
Iraq | Baghdad | 1 | | Basra
the Philippines | Manila | 1 | | Cebu
Vietnam | Hanoi | 1 | | Da Nang
Ukraine | Kyiv | 1 | Kiev | Kharkiv
the United States | Washington | 1 | Washington, D.C.; Washington DC | New York
Scotland | Edinburgh | 1 | | Glasgow
Chile | Santiago | 1 | | Valparaiso
Colombia | Bogota | 1 | Bogotá | Medellin
Iceland | Reykjavik | 1 | Reykjavík | Akureyri
Canada | Ottawa | 2 | | Toronto
Australia | Canberra | 2 | | Sydney
Turkey | Ankara | 2 | | Istanbul
Brazil | Brasilia | 2 | Brasília | Sao Paulo
Switzerland | Bern | 2 | Berne | Zurich
New Zealand | Wellington | 2 | | Auckland
Saudi Arabia | Riyadh | 2 | | Jeddah
Venezuela | Caracas | 2 | | Maracaibo
Nigeria | Abuja | 2 | | Lagos
Pakistan | Islamabad | 2 | | Karachi
Bangladesh | Dhaka | 2 | | Chittagong
Afghanistan | Kabul | 2 | | Kandahar
Syria | Damascus | 2 | | Aleppo
Lebanon | Beirut | 2 | | Sidon
Jordan | Amman | 2 | | Zarqa
Morocco | Rabat | 2 | | Casablanca
Ethiopia | Addis Ababa | 2 | | Gondar
Ghana | Accra | 2 | | Kumasi
Romania | Bucharest | 2 | | Cluj-Napoca
Bulgaria | Sofia | 2 | | Plovdiv
Serbia | Belgrade | 2 | | Novi Sad
Croatia | Zagreb | 2 | | Split
Slovakia | Bratislava | 2 | | Kosice
Estonia | Tallinn | 2 | | Tartu
Latvia | Riga | 2 | | Daugavpils
Belarus | Minsk | 2 | | Gomel
Nepal | Kathmandu | 2 | | Pokhara
Malaysia | Kuala Lumpur | 2 | | Penang
North Korea | Pyongyang | 2 | | Hamhung
Qatar | Doha | 2 | | Al Rayyan
the United Arab Emirates | Abu Dhabi | 2 | | Dubai
Algeria | Algiers | 2 | | Oran
Libya | Tripoli | 2 | | Benghazi
Ecuador | Quito | 2 | | Guayaquil
Jamaica | Kingston | 2 | | Montego Bay
Tunisia | Tunis | 2 | | Sfax
Slovenia | Ljubljana | 3 | |
Lithuania | Vilnius | 3 | |
Georgia | Tbilisi | 3 | |
Armenia | Yerevan | 3 | |
Azerbaijan | Baku | 3 | |
Kazakhstan | Astana | 3 | Nur-Sultan |
Uzbekistan | Tashkent | 3 | |
Mongolia | Ulaanbaatar | 3 | Ulan Bator |
Cambodia | Phnom Penh | 3 | |
Laos | Vientiane | 3 | |
Myanmar | Naypyidaw | 3 | Naypyitaw; Nay Pyi Taw |
Oman | Muscat | 3 | |
Sudan | Khartoum | 3 | |
Tanzania | Dodoma | 3 | |
Uganda | Kampala | 3 | |
Rwanda | Kigali | 3 | |
Senegal | Dakar | 3 | |
Mali | Bamako | 3 | |
Burkina Faso | Ouagadougou | 3 | |
Niger | Niamey | 3 | |
Zimbabwe | Harare | 3 | |
Zambia | Lusaka | 3 | |
Angola | Luanda | 3 | |
Mozambique | Maputo | 3 | |
Madagascar | Antananarivo | 3 | |
Namibia | Windhoek | 3 | |
Botswana | Gaborone | 3 | |
Paraguay | Asuncion | 3 | Asunción |
Uruguay | Montevideo | 3 | |
Honduras | Tegucigalpa | 3 | |
Nicaragua | Managua | 3 | |
Haiti | Port-au-Prince | 3 | |
Albania | Tirana | 3 | Tiranë |
North Macedonia | Skopje | 3 | |
Bosnia and Herzegovina | Sarajevo | 3 | |
Montenegro | Podgorica | 3 | |
Moldova | Chisinau | 3 | Chișinău |
Cyprus | Nicosia | 3 | |
Malta | Valletta | 3 | |
Bhutan | Thimphu | 3 | |
Kyrgyzstan | Bishkek | 3 | |
Tajikistan | Dushanbe | 3 | |
Turkmenistan | Ashgabat | 3 | |
Eritrea | Asmara | 3 | |
Somalia | Mogadishu | 3 | |
Cameroon | Yaounde | 3 | Yaoundé |
Gabon | Libreville | 3 | |
Liberia | Monrovia | 3 | |
Sierra Leone | Freetown | 3 | |
Fiji | Suva | 3 | |
Papua New Guinea | Port Moresby | 3 | |
"""

CURRENCY = """
Japan | yen | 1 | Japanese yen
the United Kingdom | pound | 1 | pound sterling; British pound; sterling
the United States | dollar | 1 | US dollar; U.S. dollar
India | rupee | 1 | Indian rupee
China | yuan | 1 | renminbi; Chinese yuan
Russia | ruble | 1 | rouble; Russian ruble
Mexico | peso | 1 | Mexican peso
Germany | euro | 1 |
France | euro | 1 |
Italy | euro | 1 |
Spain | euro | 1 |
Switzerland | franc | 2 | Swiss franc
Brazil | real | 2 | Brazilian real; reais
South Africa | rand | 2 | South African rand
South Korea | won | 2 | South Korean won
Poland | zloty | 2 | złoty; Polish zloty
Sweden | krona | 2 | Swedish krona; kronor
Thailand | baht | 2 | Thai baht
Turkey | lira | 2 | Turkish lira
Israel | shekel | 2 | new shekel; new Israeli shekel
the Philippines | peso | 2 | Philippine peso
Argentina | peso | 2 | Argentine peso
Egypt | pound | 2 | Egyptian pound
Vietnam | dong | 3 | đồng
Indonesia | rupiah | 3 |
Hungary | forint | 3 |
the Czech Republic | koruna | 3 | Czech crown
Denmark | krone | 3 | Danish krone; kroner
Norway | krone | 3 | Norwegian krone; kroner
Saudi Arabia | riyal | 3 | Saudi riyal
Malaysia | ringgit | 3 |
Nigeria | naira | 3 |
Bangladesh | taka | 3 |
Ukraine | hryvnia | 3 | hryvnya
Romania | leu | 3 | lei
Iceland | krona | 3 | króna; Icelandic krona
Georgia | lari | 3 |
Armenia | dram | 3 |
Peru | sol | 3 | nuevo sol
Venezuela | bolivar | 3 | bolívar
Costa Rica | colon | 3 | colón
Guatemala | quetzal | 3 |
Paraguay | guarani | 3 | guaraní
Cambodia | riel | 3 |
Laos | kip | 3 |
"""

LANGUAGE = """
Brazil | Portuguese | 1 |
Austria | German | 1 |
Egypt | Arabic | 1 |
Saudi Arabia | Arabic | 1 |
Colombia | Spanish | 1 |
Cuba | Spanish | 1 |
Venezuela | Spanish | 1 |
the Netherlands | Dutch | 2 |
Iran | Persian | 2 | Farsi
Israel | Hebrew | 2 |
Angola | Portuguese | 2 |
Bangladesh | Bengali | 2 | Bangla
Syria | Arabic | 2 |
Jordan | Arabic | 2 |
Tunisia | Arabic | 2 |
Costa Rica | Spanish | 2 |
Guatemala | Spanish | 2 |
Honduras | Spanish | 2 |
Nicaragua | Spanish | 2 |
the Dominican Republic | Spanish | 2 |
Liechtenstein | German | 2 |
Kuwait | Arabic | 2 |
Qatar | Arabic | 2 |
Libya | Arabic | 2 |
Mozambique | Portuguese | 3 |
Cambodia | Khmer | 3 |
Myanmar | Burmese | 3 | Myanmar language
Andorra | Catalan | 3 |
Senegal | French | 3 |
Suriname | Dutch | 3 |
Guinea-Bissau | Portuguese | 3 |
Cape Verde | Portuguese | 3 |
the Democratic Republic of the Congo | French | 3 |
"""

CONTINENT = """
Kenya | Africa | 1 |
Brazil | South America | 1 |
Egypt | Africa | 1 |
Japan | Asia | 1 |
Canada | North America | 1 |
Argentina | South America | 1 |
Nigeria | Africa | 1 |
India | Asia | 1 |
Norway | Europe | 1 |
Peru | South America | 2 |
Mongolia | Asia | 2 |
Morocco | Africa | 2 |
Poland | Europe | 2 |
Ghana | Africa | 2 |
Colombia | South America | 2 |
Vietnam | Asia | 2 |
Paraguay | South America | 3 |
Namibia | Africa | 3 |
Laos | Asia | 3 |
Moldova | Europe | 3 |
"""

AUTHOR = """
the play Romeo and Juliet | William Shakespeare | 1 |
the play Hamlet | William Shakespeare | 1 |
the play Macbeth | William Shakespeare | 1 |
the Harry Potter books | J. K. Rowling | 1 | Rowling
the novel Pride and Prejudice | Jane Austen | 1 |
the novel 1984 | George Orwell | 1 |
the novel Animal Farm | George Orwell | 1 |
the novel Don Quixote | Miguel de Cervantes | 1 | Cervantes
the novel The Lord of the Rings | J. R. R. Tolkien | 1 | Tolkien
the novel The Hobbit | J. R. R. Tolkien | 1 | Tolkien
the novella A Christmas Carol | Charles Dickens | 1 |
the novel Oliver Twist | Charles Dickens | 1 |
the novel The Adventures of Tom Sawyer | Mark Twain | 1 |
the novel War and Peace | Leo Tolstoy | 1 |
the epic poem The Odyssey | Homer | 1 |
the Sherlock Holmes stories | Arthur Conan Doyle | 1 | Conan Doyle
the novel Alice's Adventures in Wonderland | Lewis Carroll | 1 |
the novel Frankenstein | Mary Shelley | 1 |
the novel Dracula | Bram Stoker | 1 |
the novel Les Miserables | Victor Hugo | 1 |
the novel The Old Man and the Sea | Ernest Hemingway | 1 |
the novel The Great Gatsby | F. Scott Fitzgerald | 1 | Scott Fitzgerald
the novel To Kill a Mockingbird | Harper Lee | 1 |
the novel Moby-Dick | Herman Melville | 1 |
the children's book The Cat in the Hat | Dr. Seuss | 1 | Seuss
the novel Charlie and the Chocolate Factory | Roald Dahl | 1 |
the epic poem The Iliad | Homer | 1 |
the novel Great Expectations | Charles Dickens | 2 |
the novel Adventures of Huckleberry Finn | Mark Twain | 2 |
the novel Anna Karenina | Leo Tolstoy | 2 |
the novel Crime and Punishment | Fyodor Dostoevsky | 2 | Dostoyevsky
the novel The Brothers Karamazov | Fyodor Dostoevsky | 2 | Dostoyevsky
the novel The Hunchback of Notre-Dame | Victor Hugo | 2 |
the children's novel Matilda | Roald Dahl | 2 |
the novella The Little Prince | Antoine de Saint-Exupery | 2 | Saint-Exupéry; Antoine de Saint-Exupéry
the novel Robinson Crusoe | Daniel Defoe | 2 |
the novel Gulliver's Travels | Jonathan Swift | 2 |
the novel Treasure Island | Robert Louis Stevenson | 2 | Stevenson
the story collection The Jungle Book | Rudyard Kipling | 2 |
the novel Little Women | Louisa May Alcott | 2 | Alcott
the novel Jane Eyre | Charlotte Bronte | 2 | Charlotte Brontë
the novel Wuthering Heights | Emily Bronte | 2 | Emily Brontë
the novel The Catcher in the Rye | J. D. Salinger | 2 | Salinger
the novella Of Mice and Men | John Steinbeck | 2 |
the novel The Grapes of Wrath | John Steinbeck | 2 |
the novel Brave New World | Aldous Huxley | 2 |
the novel Fahrenheit 451 | Ray Bradbury | 2 |
the novel Lord of the Flies | William Golding | 2 |
the Chronicles of Narnia | C. S. Lewis | 2 |
the Canterbury Tales | Geoffrey Chaucer | 2 |
the epic poem Paradise Lost | John Milton | 2 |
the novella The Metamorphosis | Franz Kafka | 2 |
the novel One Hundred Years of Solitude | Gabriel Garcia Marquez | 2 | García Márquez; Gabriel García Márquez; Garcia Marquez
the novel The Da Vinci Code | Dan Brown | 2 |
the novel The Hunger Games | Suzanne Collins | 2 |
the novel A Game of Thrones | George R. R. Martin | 2 |
the novel Murder on the Orient Express | Agatha Christie | 2 |
the novel Madame Bovary | Gustave Flaubert | 2 |
the novel The Count of Monte Cristo | Alexandre Dumas | 2 |
the novel The Three Musketeers | Alexandre Dumas | 2 |
the novel Ulysses | James Joyce | 2 |
the novel The Picture of Dorian Gray | Oscar Wilde | 2 |
the novel Lolita | Vladimir Nabokov | 2 |
the novel Gone with the Wind | Margaret Mitchell | 2 |
the poem The Raven | Edgar Allan Poe | 2 |
the novel The Time Machine | H. G. Wells | 2 |
the novel The War of the Worlds | H. G. Wells | 2 |
the novel Around the World in Eighty Days | Jules Verne | 2 |
the novel Twenty Thousand Leagues Under the Seas | Jules Verne | 2 |
the play Peter Pan | J. M. Barrie | 2 |
the book Winnie-the-Pooh | A. A. Milne | 2 |
the novella Candide | Voltaire | 2 |
the treatise The Prince | Niccolo Machiavelli | 2 | Niccolò Machiavelli
the novel The Shining | Stephen King | 2 |
the novel The Stranger | Albert Camus | 2 |
the novel Mrs Dalloway | Virginia Woolf | 2 |
the novel The Master and Margarita | Mikhail Bulgakov | 3 |
the novel Dead Souls | Nikolai Gogol | 3 |
the novel Fathers and Sons | Ivan Turgenev | 3 |
the novel Doctor Zhivago | Boris Pasternak | 3 |
the novel Things Fall Apart | Chinua Achebe | 3 |
the novel The Tin Drum | Gunter Grass | 3 | Günter Grass
the novel The Magic Mountain | Thomas Mann | 3 |
the novel Buddenbrooks | Thomas Mann | 3 |
the novel Pedro Paramo | Juan Rulfo | 3 |
the novel The Name of the Rose | Umberto Eco | 3 |
the novel The Plague | Albert Camus | 3 |
the novel Nausea | Jean-Paul Sartre | 3 | Sartre
the novel The Trial | Franz Kafka | 3 |
the novel Siddhartha | Hermann Hesse | 3 |
the novel Steppenwolf | Hermann Hesse | 3 |
the novel The Sorrows of Young Werther | Johann Wolfgang von Goethe | 3 | Goethe
the novel Beloved | Toni Morrison | 3 |
the novel Invisible Man | Ralph Ellison | 3 |
the novel The Sound and the Fury | William Faulkner | 3 |
the novel Catch-22 | Joseph Heller | 3 |
the novel Slaughterhouse-Five | Kurt Vonnegut | 3 |
the novel Midnight's Children | Salman Rushdie | 3 |
the novel Norwegian Wood | Haruki Murakami | 3 |
the play Waiting for Godot | Samuel Beckett | 3 |
the play A Doll's House | Henrik Ibsen | 3 |
the play The Seagull | Anton Chekhov | 3 |
the play Death of a Salesman | Arthur Miller | 3 |
the play A Streetcar Named Desire | Tennessee Williams | 3 |
the novel The Handmaid's Tale | Margaret Atwood | 3 |
the novel Uncle Tom's Cabin | Harriet Beecher Stowe | 3 | Beecher Stowe
the novel The Scarlet Letter | Nathaniel Hawthorne | 3 |
the book Walden | Henry David Thoreau | 3 | Thoreau
the poetry collection Leaves of Grass | Walt Whitman | 3 |
the novel The Call of the Wild | Jack London | 3 |
the novel The Wind in the Willows | Kenneth Grahame | 3 |
the novel Anne of Green Gables | L. M. Montgomery | 3 | Montgomery
the novel Heidi | Johanna Spyri | 3 |
the novel The Adventures of Pinocchio | Carlo Collodi | 3 |
the novel Black Beauty | Anna Sewell | 3 |
the novel Heart of Darkness | Joseph Conrad | 3 |
the novel Middlemarch | George Eliot | 3 |
the novel Vanity Fair | William Makepeace Thackeray | 3 | Thackeray
the book The Wealth of Nations | Adam Smith | 2 |
the book On the Origin of Species | Charles Darwin | 2 |
the book Thus Spoke Zarathustra | Friedrich Nietzsche | 3 |
the book Leviathan | Thomas Hobbes | 3 |
"""

COMPOSER = """
The Four Seasons | Antonio Vivaldi | 1 |
the opera The Magic Flute | Wolfgang Amadeus Mozart | 1 |
the ballet Swan Lake | Pyotr Ilyich Tchaikovsky | 1 | Tchaikovsky
the ballet The Nutcracker | Pyotr Ilyich Tchaikovsky | 1 | Tchaikovsky
the Moonlight Sonata | Ludwig van Beethoven | 1 | Beethoven
the piano piece Fur Elise | Ludwig van Beethoven | 1 | Beethoven
the serenade Eine kleine Nachtmusik | Wolfgang Amadeus Mozart | 1 |
the ballet The Rite of Spring | Igor Stravinsky | 2 |
the orchestral piece Bolero | Maurice Ravel | 2 |
the suite The Planets | Gustav Holst | 2 |
the opera Carmen | Georges Bizet | 2 |
the opera La traviata | Giuseppe Verdi | 2 | Verdi
the opera Aida | Giuseppe Verdi | 2 | Verdi
the opera Madama Butterfly | Giacomo Puccini | 2 |
the opera La boheme | Giacomo Puccini | 2 |
the opera The Barber of Seville | Gioachino Rossini | 2 | Rossini
the oratorio Messiah | George Frideric Handel | 2 | Handel
the Brandenburg Concertos | Johann Sebastian Bach | 2 | Bach; J. S. Bach
the piece Rhapsody in Blue | George Gershwin | 2 |
the piano piece Clair de lune | Claude Debussy | 2 |
the 1812 Overture | Pyotr Ilyich Tchaikovsky | 2 | Tchaikovsky
the waltz The Blue Danube | Johann Strauss II | 2 | Johann Strauss; Strauss
the opera Tosca | Giacomo Puccini | 3 |
the suite Water Music | George Frideric Handel | 3 | Handel
The Well-Tempered Clavier | Johann Sebastian Bach | 3 | Bach; J. S. Bach
the music for the play Peer Gynt | Edvard Grieg | 3 |
the opera cycle The Ring of the Nibelung | Richard Wagner | 3 |
the Gymnopedies | Erik Satie | 3 |
the suite Pictures at an Exhibition | Modest Mussorgsky | 3 |
the symphonic suite Scheherazade | Nikolai Rimsky-Korsakov | 3 | Rimsky-Korsakov
the tone poem Finlandia | Jean Sibelius | 3 |
the symphony From the New World | Antonin Dvorak | 3 | Dvořák; Antonín Dvořák
the suite The Carnival of the Animals | Camille Saint-Saens | 3 | Saint-Saëns
the musical tale Peter and the Wolf | Sergei Prokofiev | 3 |
the Canon in D | Johann Pachelbel | 3 |
the Adagio for Strings | Samuel Barber | 3 |
the ballet Appalachian Spring | Aaron Copland | 3 |
the opera William Tell | Gioachino Rossini | 3 | Rossini
the opera The Marriage of Figaro | Wolfgang Amadeus Mozart | 2 |
the opera Don Giovanni | Wolfgang Amadeus Mozart | 2 |
"""

PAINTER = """
the Mona Lisa | Leonardo da Vinci | 1 | Leonardo; da Vinci
The Starry Night | Vincent van Gogh | 1 | van Gogh
The Scream | Edvard Munch | 1 |
Guernica | Pablo Picasso | 1 |
The Last Supper | Leonardo da Vinci | 1 | Leonardo; da Vinci
The Birth of Venus | Sandro Botticelli | 2 |
The Persistence of Memory | Salvador Dali | 2 | Dalí; Salvador Dalí
Girl with a Pearl Earring | Johannes Vermeer | 2 | Jan Vermeer
The Night Watch | Rembrandt | 2 | Rembrandt van Rijn
the ceiling of the Sistine Chapel | Michelangelo | 2 | Michelangelo Buonarroti
the Water Lilies series | Claude Monet | 2 |
Impression, Sunrise | Claude Monet | 2 |
The Kiss | Gustav Klimt | 2 |
Sunflowers | Vincent van Gogh | 2 | van Gogh
American Gothic | Grant Wood | 2 |
The Great Wave off Kanagawa | Katsushika Hokusai | 2 | Hokusai
Campbell's Soup Cans | Andy Warhol | 2 |
The School of Athens | Raphael | 2 | Raffaello Sanzio
Las Meninas | Diego Velazquez | 3 | Velázquez; Diego Velázquez
The Garden of Earthly Delights | Hieronymus Bosch | 3 |
Nighthawks | Edward Hopper | 3 |
Liberty Leading the People | Eugene Delacroix | 3 | Eugène Delacroix
The Third of May 1808 | Francisco Goya | 3 | Goya
The Arnolfini Portrait | Jan van Eyck | 3 | van Eyck
A Sunday Afternoon on the Island of La Grande Jatte | Georges Seurat | 3 |
Luncheon of the Boating Party | Pierre-Auguste Renoir | 3 | Renoir
The Son of Man | Rene Magritte | 3 | René Magritte
Whistler's Mother | James McNeill Whistler | 3 | Whistler
The Hay Wain | John Constable | 3 |
Olympia | Edouard Manet | 3 | Édouard Manet
The Raft of the Medusa | Theodore Gericault | 3 | Géricault; Théodore Géricault
The Sleeping Gypsy | Henri Rousseau | 3 |
Christina's World | Andrew Wyeth | 3 |
The Fighting Temeraire | J. M. W. Turner | 3 | Turner
Wanderer above the Sea of Fog | Caspar David Friedrich | 3 |
Les Demoiselles d'Avignon | Pablo Picasso | 3 |
The Card Players | Paul Cezanne | 3 | Cézanne; Paul Cézanne
Primavera | Sandro Botticelli | 3 |
"""

INVENTOR = """
the telephone | Alexander Graham Bell | 1 | Graham Bell
the World Wide Web | Tim Berners-Lee | 2 |
dynamite | Alfred Nobel | 2 |
the phonograph | Thomas Edison | 2 | Thomas Alva Edison
the printing press with movable type in Europe | Johannes Gutenberg | 1 |
the first successful powered airplane | the Wright brothers | 1 | Wright brothers; Orville and Wilbur Wright; Wilbur and Orville Wright
the cotton gin | Eli Whitney | 3 |
the lightning rod | Benjamin Franklin | 2 |
the Morse code | Samuel Morse | 2 |
the diesel engine | Rudolf Diesel | 2 |
the Braille writing system | Louis Braille | 2 |
the Celsius temperature scale | Anders Celsius | 2 |
the Fahrenheit temperature scale | Daniel Gabriel Fahrenheit | 2 | Fahrenheit
the mercury barometer | Evangelista Torricelli | 3 |
the Rubik's Cube | Erno Rubik | 2 | Ernő Rubik
the ballpoint pen | Laszlo Biro | 3 | László Bíró; Biro
the voltaic pile | Alessandro Volta | 3 |
the saxophone | Adolphe Sax | 3 |
the spinning jenny | James Hargreaves | 3 |
the AK-47 rifle | Mikhail Kalashnikov | 3 |
the Bessemer process for making steel | Henry Bessemer | 3 |
the mechanical reaper | Cyrus McCormick | 3 |
the Colt revolver | Samuel Colt | 3 |
the Geiger counter | Hans Geiger | 3 |
"""

# "Who {s}?" - s is a verb phrase; context "{A} {s}."
DISCOVERY = """
discovered penicillin | Alexander Fleming | 1 |
developed the theory of relativity | Albert Einstein | 1 |
formulated the three laws of motion | Isaac Newton | 1 |
proposed the theory of evolution by natural selection | Charles Darwin | 1 |
discovered radium and polonium | Marie Curie | 1 | Marie and Pierre Curie; Curie
proposed the heliocentric model of the Solar System | Nicolaus Copernicus | 2 |
discovered the electron | J. J. Thomson | 3 | Thomson
discovered the neutron | James Chadwick | 3 |
discovered the atomic nucleus | Ernest Rutherford | 2 |
formulated the uncertainty principle | Werner Heisenberg | 2 |
founded the science of genetics with experiments on pea plants | Gregor Mendel | 2 |
discovered the double helix structure of DNA | James Watson and Francis Crick | 2 | Watson and Crick; Crick and Watson; James Watson; Francis Crick
formulated the laws of planetary motion | Johannes Kepler | 2 |
discovered X-rays | Wilhelm Rontgen | 2 | Röntgen; Roentgen; Wilhelm Röntgen; Wilhelm Conrad Röntgen
developed the first smallpox vaccine | Edward Jenner | 2 |
discovered the four largest moons of Jupiter | Galileo Galilei | 2 | Galileo
discovered the planet Uranus | William Herschel | 3 |
discovered Pluto | Clyde Tombaugh | 3 |
described the circulation of the blood | William Harvey | 3 |
proposed the theory of continental drift | Alfred Wegener | 3 |
discovered electromagnetic induction | Michael Faraday | 2 |
formulated the equations of electromagnetism | James Clerk Maxwell | 2 | Maxwell
discovered radioactivity | Henri Becquerel | 3 |
formulated the law of conservation of mass | Antoine Lavoisier | 3 |
developed the first effective polio vaccine | Jonas Salk | 2 |
identified the bacterium that causes tuberculosis | Robert Koch | 3 |
developed pasteurization | Louis Pasteur | 1 |
originated quantum theory | Max Planck | 2 |
created the periodic table of the elements | Dmitri Mendeleev | 2 | Mendeleyev
discovered the principle of buoyancy | Archimedes | 1 |
calculated the orbit of the comet that bears his name | Edmond Halley | 2 | Halley
"""

ELEMENT_SYMBOL = """
gold | Au | 1 |
silver | Ag | 1 |
iron | Fe | 1 |
oxygen | O | 1 |
hydrogen | H | 1 |
sodium | Na | 1 |
carbon | C | 1 |
helium | He | 1 |
nitrogen | N | 1 |
copper | Cu | 1 |
lead | Pb | 2 |
potassium | K | 2 |
mercury | Hg | 2 |
tin | Sn | 2 |
calcium | Ca | 2 |
chlorine | Cl | 2 |
zinc | Zn | 2 |
sulfur | S | 2 |
uranium | U | 2 |
neon | Ne | 2 |
magnesium | Mg | 2 |
aluminium | Al | 2 |
platinum | Pt | 2 |
silicon | Si | 2 |
phosphorus | P | 2 |
nickel | Ni | 2 |
lithium | Li | 2 |
fluorine | F | 2 |
tungsten | W | 3 |
antimony | Sb | 3 |
manganese | Mn | 3 |
chromium | Cr | 3 |
cobalt | Co | 3 |
arsenic | As | 3 |
bromine | Br | 3 |
argon | Ar | 3 |
krypton | Kr | 3 |
xenon | Xe | 3 |
titanium | Ti | 3 |
plutonium | Pu | 3 |
bismuth | Bi | 3 |
barium | Ba | 3 |
strontium | Sr | 3 |
cadmium | Cd | 3 |
selenium | Se | 3 |
"""

ELEMENT_NUMBER = """
hydrogen | 1 | 1 |
helium | 2 | 1 |
carbon | 6 | 2 |
oxygen | 8 | 2 |
nitrogen | 7 | 2 |
lithium | 3 | 2 |
neon | 10 | 3 |
sodium | 11 | 3 |
iron | 26 | 3 |
gold | 79 | 3 |
uranium | 92 | 3 |
copper | 29 | 3 |
calcium | 20 | 3 |
silver | 47 | 3 |
lead | 82 | 3 |
mercury | 80 | 3 |
"""

LANDMARK_CITY = """
the Eiffel Tower | Paris | 1 | | London
the Colosseum | Rome | 1 | | Athens
Big Ben | London | 1 | | Paris
the Statue of Liberty | New York | 1 | New York City | Boston
the Taj Mahal | Agra | 2 | | Delhi
the Kremlin | Moscow | 1 | | Kyiv
the Acropolis | Athens | 1 | | Rome
the Brandenburg Gate | Berlin | 1 | | Vienna
the Golden Gate Bridge | San Francisco | 1 | | Los Angeles
the Forbidden City | Beijing | 1 | | Shanghai
the Louvre | Paris | 1 | | Brussels
the Burj Khalifa | Dubai | 1 | | Doha
the Sagrada Familia | Barcelona | 2 | | Madrid
the Christ the Redeemer statue | Rio de Janeiro | 2 | Rio | Sao Paulo
the Hagia Sophia | Istanbul | 2 | | Athens
the Petronas Towers | Kuala Lumpur | 2 | | Singapore
the Alhambra | Granada | 3 | | Seville
the Prado Museum | Madrid | 2 | | Lisbon
the Hermitage Museum | Saint Petersburg | 3 | St. Petersburg; St Petersburg |
the Uffizi Gallery | Florence | 3 | |
the Rijksmuseum | Amsterdam | 3 | |
the Space Needle | Seattle | 2 | | Portland
the CN Tower | Toronto | 2 | | Vancouver
the Gateway Arch | St. Louis | 3 | Saint Louis; St Louis |
the Empire State Building | New York | 1 | New York City | Chicago
Tower Bridge | London | 1 | | Dublin
Westminster Abbey | London | 1 | | Edinburgh
the Trevi Fountain | Rome | 2 | | Venice
the Charles Bridge | Prague | 3 | |
the Atomium | Brussels | 3 | |
the Blue Mosque | Istanbul | 2 | | Cairo
Red Square | Moscow | 1 | | Warsaw
the Potala Palace | Lhasa | 3 | |
the Marina Bay Sands hotel | Singapore | 2 | |
the Shwedagon Pagoda | Yangon | 3 | Rangoon |
the Little Mermaid statue | Copenhagen | 3 | |
the Parthenon | Athens | 1 | | Rome
Buckingham Palace | London | 1 | | Paris
the White House | Washington | 1 | Washington, D.C. | New York
the Arc de Triomphe | Paris | 1 | | Madrid
the Leaning Tower | Pisa | 1 | | Florence
"""

PLACE_COUNTRY = """
Machu Picchu | Peru | 1 | | Bolivia
the Great Pyramid of Giza | Egypt | 1 | | Sudan
Mount Fuji | Japan | 1 | | China
Stonehenge | England | 1 | United Kingdom; UK; Britain | Ireland
the Great Wall | China | 1 | | Mongolia
the Taj Mahal | India | 1 | | Pakistan
Angkor Wat | Cambodia | 2 | | Thailand
Petra | Jordan | 2 | | Syria
Timbuktu | Mali | 3 | |
Chichen Itza | Mexico | 2 | | Guatemala
Mount Kilimanjaro | Tanzania | 2 | | Kenya
Uluru | Australia | 2 | | New Zealand
Table Mountain | South Africa | 2 | | Namibia
Neuschwanstein Castle | Germany | 2 | | Austria
Easter Island | Chile | 2 | | Peru
the Galapagos Islands | Ecuador | 2 | Galápagos | Colombia
Cappadocia | Turkey | 3 | |
Borobudur | Indonesia | 3 | |
Ha Long Bay | Vietnam | 3 | |
Bagan | Myanmar | 3 | Burma |
Tikal | Guatemala | 3 | |
Sigiriya | Sri Lanka | 3 | |
Mont Saint-Michel | France | 2 | | Belgium
Lake Baikal | Russia | 2 | | Kazakhstan
the Atacama Desert | Chile | 3 | |
Kruger National Park | South Africa | 3 | |
Yellowstone National Park | the United States | 1 | United States; USA; America; U.S. | Canada
the Serengeti National Park | Tanzania | 3 | |
Marrakesh | Morocco | 2 | Marrakech | Algeria
Kyoto | Japan | 1 | | Korea
Mumbai | India | 1 | | Bangladesh
Salzburg | Austria | 2 | | Switzerland
Krakow | Poland | 2 | | Czechia
Venice | Italy | 1 | | Croatia
Barcelona | Spain | 1 | | Portugal
Rio de Janeiro | Brazil | 1 | | Argentina
Toronto | Canada | 1 | | the United States
Istanbul | Turkey | 1 | | Greece
Dubai | the United Arab Emirates | 2 | United Arab Emirates; UAE | Qatar
Casablanca | Morocco | 2 | | Tunisia
"""

RIVER_CITY = """
Paris | Seine | 1 | | Loire
London | Thames | 1 | | Severn
Rome | Tiber | 2 | | Arno
Cairo | Nile | 1 | | Euphrates
Vienna | Danube | 2 | | Rhine
Budapest | Danube | 2 | | Elbe
Baghdad | Tigris | 3 | |
Prague | Vltava | 3 | Moldau |
Florence | Arno | 3 | |
Dublin | Liffey | 3 | |
Lisbon | Tagus | 3 | Tejo |
Warsaw | Vistula | 3 | |
Cologne | Rhine | 2 | | Main
Seville | Guadalquivir | 3 | |
Varanasi | Ganges | 3 | Ganga |
New Orleans | Mississippi | 2 | | Missouri
Khartoum | Nile | 3 | |
Hamburg | Elbe | 3 | |
Saint Petersburg | Neva | 3 | |
Kyiv | Dnieper | 3 | Dnipro |
Bangkok | Chao Phraya | 3 | |
Phnom Penh | Mekong | 3 | |
Bordeaux | Garonne | 3 | |
Frankfurt | Main | 3 | |
Munich | Isar | 3 | |
Washington, D.C. | Potomac | 3 | |
Belgrade | Danube | 3 | |
Bratislava | Danube | 3 | |
Moscow | Moskva | 3 | |
Dresden | Elbe | 3 | |
"""

FILM_DIRECTOR = """
the film Jaws | Steven Spielberg | 1 |
the film E.T. the Extra-Terrestrial | Steven Spielberg | 1 |
the film Jurassic Park | Steven Spielberg | 1 |
the film Titanic | James Cameron | 1 |
the film Avatar | James Cameron | 1 |
the film Star Wars | George Lucas | 1 |
the film Psycho | Alfred Hitchcock | 2 |
the film The Godfather | Francis Ford Coppola | 2 | Coppola
the film Pulp Fiction | Quentin Tarantino | 2 |
the film Schindler's List | Steven Spielberg | 2 |
the film 2001: A Space Odyssey | Stanley Kubrick | 2 |
the Lord of the Rings film trilogy | Peter Jackson | 2 |
the film Inception | Christopher Nolan | 2 |
the film Vertigo | Alfred Hitchcock | 2 |
the film The Shining | Stanley Kubrick | 2 |
the film The Terminator | James Cameron | 2 |
the film Spirited Away | Hayao Miyazaki | 2 | Miyazaki
the film Seven Samurai | Akira Kurosawa | 3 |
the film Rashomon | Akira Kurosawa | 3 |
the film Citizen Kane | Orson Welles | 2 |
the film Parasite | Bong Joon-ho | 3 | Bong Joon Ho
the film Taxi Driver | Martin Scorsese | 3 |
the film Apocalypse Now | Francis Ford Coppola | 3 | Coppola
the film Blade Runner | Ridley Scott | 3 |
the film Alien | Ridley Scott | 3 |
the film La Dolce Vita | Federico Fellini | 3 |
the film The Seventh Seal | Ingmar Bergman | 3 |
the film Bicycle Thieves | Vittorio De Sica | 3 | De Sica
the film Pan's Labyrinth | Guillermo del Toro | 3 | del Toro
the film Amelie | Jean-Pierre Jeunet | 3 | Jeunet
the film The Dark Knight | Christopher Nolan | 2 |
"""

SONG_ARTIST = """
the album Thriller | Michael Jackson | 1 |
the song Billie Jean | Michael Jackson | 1 |
the song Bohemian Rhapsody | Queen | 1 |
the song Imagine | John Lennon | 1 |
the song Hey Jude | the Beatles | 1 | Beatles; The Beatles
the song Yesterday | the Beatles | 2 | Beatles; The Beatles
the song Purple Rain | Prince | 2 |
the song Smells Like Teen Spirit | Nirvana | 2 |
the song Stairway to Heaven | Led Zeppelin | 2 |
the song Hotel California | the Eagles | 2 | Eagles; The Eagles
the song Dancing Queen | ABBA | 2 |
the song Wonderwall | Oasis | 2 |
the song Like a Prayer | Madonna | 2 |
the song Rolling in the Deep | Adele | 2 |
the song Shape of You | Ed Sheeran | 2 |
the song Born in the U.S.A. | Bruce Springsteen | 2 |
the song Heartbreak Hotel | Elvis Presley | 2 | Elvis
the song Space Oddity | David Bowie | 2 |
the song No Woman, No Cry | Bob Marley | 3 | Bob Marley and the Wailers
the song Sweet Child o' Mine | Guns N' Roses | 2 |
the song Another Brick in the Wall | Pink Floyd | 2 |
the song Hallelujah | Leonard Cohen | 3 |
the song (I Can't Get No) Satisfaction | the Rolling Stones | 2 | Rolling Stones; The Rolling Stones
the song Blowin' in the Wind | Bob Dylan | 3 |
the song Like a Rolling Stone | Bob Dylan | 3 |
"""

COMPANY_FOUNDER = """
Microsoft | Bill Gates | 1 | Gates; Paul Allen; Bill Gates and Paul Allen
Apple | Steve Jobs | 1 | Jobs; Steve Wozniak; Wozniak
Amazon | Jeff Bezos | 1 | Bezos
Facebook | Mark Zuckerberg | 1 | Zuckerberg
SpaceX | Elon Musk | 1 | Musk
Google | Larry Page and Sergey Brin | 1 | Larry Page; Sergey Brin; Brin
Alibaba | Jack Ma | 2 |
Oracle | Larry Ellison | 3 | Ellison
Nike | Phil Knight | 3 | Bill Bowerman
IKEA | Ingvar Kamprad | 2 | Kamprad
the Virgin Group | Richard Branson | 2 | Branson
Netflix | Reed Hastings | 3 | Marc Randolph
Wikipedia | Jimmy Wales | 2 | Larry Sanger
Nvidia | Jensen Huang | 2 |
Adidas | Adolf Dassler | 3 | Adi Dassler; Dassler
Zara | Amancio Ortega | 3 | Ortega
Huawei | Ren Zhengfei | 3 |
Samsung | Lee Byung-chul | 3 |
Instagram | Kevin Systrom | 3 | Systrom; Mike Krieger
LinkedIn | Reid Hoffman | 3 |
"""

COMPANY_PRODUCT = """
the iPhone | Apple | 1 | | Samsung
the Windows operating system | Microsoft | 1 | | Apple
the PlayStation game console | Sony | 1 | | Nintendo
the Xbox game console | Microsoft | 1 | | Sony
the Galaxy smartphones | Samsung | 1 | | Apple
the Big Mac | McDonald's | 1 | McDonalds | Burger King
the Kindle e-reader | Amazon | 1 | | Google
the Model S electric car | Tesla | 1 | | Ford
the Corolla car | Toyota | 2 | | Honda
the Golf car | Volkswagen | 2 | VW | Renault
the Walkman | Sony | 2 | | Panasonic
the Switch game console | Nintendo | 1 | | Sega
the Photoshop software | Adobe | 2 | | Microsoft
the Mustang car | Ford | 2 | | Chevrolet
the 911 sports car | Porsche | 2 | | Ferrari
the Pentium processors | Intel | 2 | | AMD
the ThinkPad laptops | Lenovo | 3 | |
the Civic car | Honda | 2 | | Toyota
the ChatGPT chatbot | OpenAI | 2 | | Google
the Android operating system | Google | 2 | | Microsoft
the Macintosh computer | Apple | 1 | | IBM
"""

ATHLETE_SPORT = """
Michael Jordan | basketball | 1 | | baseball
Tiger Woods | golf | 1 | | tennis
Roger Federer | tennis | 1 | | golf
Lionel Messi | football | 1 | soccer | basketball
Cristiano Ronaldo | football | 1 | soccer | tennis
Serena Williams | tennis | 1 | | golf
Michael Phelps | swimming | 1 | | cycling
Muhammad Ali | boxing | 1 | | wrestling
Usain Bolt | sprinting | 1 | athletics; running; track and field; 100 metres; 100m | swimming
Pele | football | 1 | soccer; Pelé | volleyball
Babe Ruth | baseball | 2 | | cricket
Wayne Gretzky | ice hockey | 2 | hockey | basketball
Sachin Tendulkar | cricket | 2 | | hockey
Diego Maradona | football | 2 | soccer | tennis
Magnus Carlsen | chess | 2 | | poker
Garry Kasparov | chess | 2 | | boxing
Rafael Nadal | tennis | 1 | | football
LeBron James | basketball | 1 | | American football
Simone Biles | gymnastics | 2 | | figure skating
Lewis Hamilton | Formula One | 2 | Formula 1; F1; motor racing | cycling
Don Bradman | cricket | 3 | |
Nadia Comaneci | gymnastics | 3 | Comăneci |
Mike Tyson | boxing | 1 | | wrestling
Novak Djokovic | tennis | 1 | | skiing
"""

WORLD_CUP = """
2014 | Germany | 2 | | Argentina
2010 | Spain | 2 | | the Netherlands
2018 | France | 2 | | Croatia
2022 | Argentina | 2 | | France
1966 | England | 3 | |
1998 | France | 3 | |
2006 | Italy | 3 | |
2002 | Brazil | 3 | |
1986 | Argentina | 3 | |
1930 | Uruguay | 3 | |
"""

OLYMPICS_HOST = """
2016 | Rio de Janeiro | 2 | Rio | London
2008 | Beijing | 2 | | Tokyo
2012 | London | 2 | | Paris
2000 | Sydney | 2 | | Melbourne
2004 | Athens | 2 | | Rome
1896 | Athens | 3 | |
1992 | Barcelona | 3 | |
1964 | Tokyo | 3 | |
1988 | Seoul | 3 | |
1996 | Atlanta | 3 | |
1936 | Berlin | 3 | |
1980 | Moscow | 3 | |
2024 | Paris | 2 | | Los Angeles
"""

UNIT_QUANTITY = """
force | newton | 1 | newtons | joule
energy | joule | 1 | joules | watt
power | watt | 1 | watts | volt
electric current | ampere | 1 | amp; amps; amperes | ohm
electrical resistance | ohm | 2 | ohms | ampere
frequency | hertz | 1 | Hz | pascal
pressure | pascal | 2 | pascals; Pa | newton
thermodynamic temperature | kelvin | 2 |  | degree Celsius
mass | kilogram | 1 | kilograms; kg | gram
length | metre | 1 | meter; metres; meters | foot
electric charge | coulomb | 2 | coulombs | ampere
electric potential difference | volt | 2 | volts | watt
luminous intensity | candela | 3 | cd |
amount of substance | mole | 3 | mol; moles |
time | second | 1 | seconds | minute
magnetic flux density | tesla | 3 |  |
"""

BODY_TERM = """
kneecap | patella | 2 | | scapula
collarbone | clavicle | 2 | | sternum
shoulder blade | scapula | 2 | | clavicle
windpipe | trachea | 2 | | larynx
voice box | larynx | 2 | | pharynx
breastbone | sternum | 2 | | patella
thighbone | femur | 2 | | tibia
jawbone | mandible | 3 | | maxilla
shinbone | tibia | 3 | | fibula
"""

# ---------------------------------------------------------------------------------------
# Free-form facts: query | paraphrase | context ({a} = the answer) | answer | difficulty | aliases | decoy
# ---------------------------------------------------------------------------------------

FREE = {
    "astronomy": """
What is the largest planet in the Solar System? | Which planet of the Solar System is the biggest? | {A} is the largest planet in the Solar System. | Jupiter | 1 | | Saturn
Which planet is known as the Red Planet? | Which planet is nicknamed the Red Planet? | {A} is known as the Red Planet because of the iron oxide on its surface. | Mars | 1 | | Venus
What is the closest planet to the Sun? | Which planet orbits nearest to the Sun? | {A} is the closest planet to the Sun. | Mercury | 1 | | Venus
Which planet is famous for its large rings? | Which planet is best known for its ring system? | {A} is famous for its large and bright rings. | Saturn | 1 | | Jupiter
What is the name of Earth's natural satellite? | What do we call the natural satellite that orbits Earth? | Earth's natural satellite is called the {a}. | Moon | 1 | | Phobos
What is the star at the centre of our Solar System? | Which star lies at the centre of the Solar System? | The star at the centre of our Solar System is the {a}. | Sun | 1 | | Sirius
How many planets are in the Solar System? | What is the number of planets in the Solar System? | There are {a} planets in the Solar System. | 8 | 1 | | 9
What is the hottest planet in the Solar System? | Which planet of the Solar System has the highest surface temperature? | {A} is the hottest planet in the Solar System, because of its thick atmosphere. | Venus | 2 | | Mercury
What galaxy contains our Solar System? | In which galaxy is our Solar System located? | Our Solar System is located in the {a} galaxy. | Milky Way | 1 | | Andromeda
What is the largest moon of Saturn? | Which of Saturn's moons is the biggest? | {A} is the largest moon of Saturn. | Titan | 2 | | Enceladus
What is the largest moon in the Solar System? | Which moon of the Solar System is the biggest? | {A}, a moon of Jupiter, is the largest moon in the Solar System. | Ganymede | 3 | |
Which planet was reclassified as a dwarf planet in 2006? | In 2006, which planet was demoted to a dwarf planet? | In 2006, {a} was reclassified as a dwarf planet. | Pluto | 1 | | Ceres
Which planet is farthest from the Sun? | Which planet of the Solar System orbits farthest from the Sun? | {A} is the farthest planet from the Sun. | Neptune | 2 | | Uranus
Which planet rotates on its side? | Which planet has an axis tilted so far that it spins on its side? | {A} rotates on its side, with an axial tilt of about 98 degrees. | Uranus | 3 | |
What is the brightest star in the night sky? | Which star shines most brightly in the night sky? | {A} is the brightest star in the night sky. | Sirius | 2 | | Vega
What is the nearest galaxy to the Milky Way that is similar in size? | Which large spiral galaxy is closest to the Milky Way? | The {a} galaxy is the nearest large spiral galaxy to the Milky Way. | Andromeda | 2 | | Triangulum
Who was the first person to walk on the Moon? | Which astronaut first set foot on the Moon? | {A} was the first person to walk on the Moon, in 1969. | Neil Armstrong | 1 | Armstrong | Buzz Aldrin
Who was the first human to travel into space? | Which cosmonaut was the first person in space? | {A} was the first human to travel into space, in 1961. | Yuri Gagarin | 1 | Gagarin | Alexei Leonov
Who was the first woman to travel into space? | Which cosmonaut was the first woman in space? | {A} was the first woman to travel into space, in 1963. | Valentina Tereshkova | 2 | Tereshkova | Svetlana Savitskaya
What is the name of the space telescope launched in 1990? | Which space telescope was launched by NASA in 1990? | The {a} Space Telescope was launched in 1990. | Hubble | 2 | | Kepler
""",
    "animals": """
What is the largest animal on Earth? | Which animal is the biggest that has ever lived? | The {a} is the largest animal on Earth. | blue whale | 1 | | fin whale
What is the fastest land animal? | Which animal runs faster than any other on land? | The {a} is the fastest land animal. | cheetah | 1 | | leopard
What is the tallest animal in the world? | Which animal is the tallest of all? | The {a} is the tallest animal in the world. | giraffe | 1 | | elephant
How many legs does a spider have? | What is the number of legs of a spider? | A spider has {a} legs. | 8 | 1 | | 6
How many legs does an insect have? | What is the number of legs of an insect? | An insect has {a} legs. | 6 | 1 | | 8
How many arms does an octopus have? | What is the number of arms of an octopus? | An octopus has {a} arms. | 8 | 1 | | 10
What is a baby kangaroo called? | What name is given to a young kangaroo? | A baby kangaroo is called a {a}. | joey | 2 | | cub
What is a group of lions called? | What name is given to a group of lions? | A group of lions is called a {a}. | pride | 2 | | pack
What is the largest bird in the world? | Which bird is the biggest of all living birds? | The {a} is the largest bird in the world. | ostrich | 1 | | emu
Which bird can fly backwards? | Which is the only bird able to fly backwards? | The {a} is the only bird that can fly backwards. | hummingbird | 2 | | swallow
Which is the only mammal capable of true flight? | What mammal is able to truly fly? | The {a} is the only mammal capable of true flight. | bat | 1 | bats | flying squirrel
What do giant pandas mainly eat? | What is the main food of giant pandas? | Giant pandas mainly eat {a}. | bamboo | 1 | | eucalyptus
What do koalas mainly eat? | What is the main food of koalas? | Koalas mainly eat {a} leaves. | eucalyptus | 2 | | bamboo
What is a baby cat called? | What name is given to a young cat? | A baby cat is called a {a}. | kitten | 1 | | puppy
What is a baby dog called? | What name is given to a young dog? | A baby dog is called a {a}. | puppy | 1 | pup | kitten
What is a baby sheep called? | What name is given to a young sheep? | A baby sheep is called a {a}. | lamb | 1 | | calf
What is a baby horse called? | What name is given to a young horse? | A baby horse is called a {a}. | foal | 2 | | calf
What is a baby cow called? | What name is given to a young cow? | A baby cow is called a {a}. | calf | 1 | | foal
What is a young frog called? | What name is given to a young frog before it grows legs? | A young frog is called a {a}. | tadpole | 2 | | larva
Which insect makes honey? | Which insect produces honey? | Honey is made by the honey {a}. | bee | 1 | bees; honeybee | wasp
How many hearts does an octopus have? | What is the number of hearts of an octopus? | An octopus has {a} hearts. | 3 | 2 | | 2
What is the largest fish in the world? | Which fish is the biggest of all fish? | The {a} is the largest fish in the world. | whale shark | 2 | | basking shark
How many humps does a Bactrian camel have? | What is the number of humps on a Bactrian camel? | A Bactrian camel has {a} humps. | 2 | 2 | | 1
What is the largest species of big cat? | Which big cat is the biggest? | The {a} is the largest species of big cat. | tiger | 2 | | lion
What is a group of wolves called? | What name is given to a group of wolves? | A group of wolves is called a {a}. | pack | 1 | | herd
Which animal is known as the king of the jungle? | Which animal is called the king of the jungle? | The {a} is known as the king of the jungle. | lion | 1 | | tiger
Which black and white striped animal lives in Africa? | Which African animal has black and white stripes? | The {a} is an African animal with black and white stripes. | zebra | 1 | | okapi
What does a caterpillar turn into? | What does a caterpillar become after metamorphosis? | A caterpillar turns into a {a} or a moth. | butterfly | 1 | | beetle
Which animal is the largest living reptile? | Which reptile is the biggest alive today? | The {a} is the largest living reptile. | saltwater crocodile | 3 | |
What is the largest land animal? | Which animal is the biggest living on land? | The {a} is the largest land animal. | African elephant | 1 | elephant | rhinoceros
What is the largest penguin species? | Which species of penguin is the biggest? | The {a} is the largest species of penguin. | emperor penguin | 3 | |
What is the process by which plants make food from sunlight? | What do we call the way plants use sunlight to make food? | Plants make food from sunlight by {a}. | photosynthesis | 1 | | respiration
Which gas do plants absorb from the air for photosynthesis? | Which gas do plants take in from the air to make food? | Plants absorb {a} from the air for photosynthesis. | carbon dioxide | 1 | CO2 | oxygen
What green pigment do plants use to capture light? | Which pigment makes plants green? | Plants use the green pigment {a} to capture light. | chlorophyll | 1 | | carotene
What is the powerhouse of the cell? | Which organelle is called the powerhouse of the cell? | The {a} is known as the powerhouse of the cell. | mitochondrion | 2 | mitochondria | ribosome
""",
    "human_body": """
What is the largest organ of the human body? | Which organ of the human body is the biggest? | The {a} is the largest organ of the human body. | skin | 1 | | liver
How many bones are in the adult human body? | What is the number of bones in an adult human? | The adult human body has {a} bones. | 206 | 1 | | 212
Which organ pumps blood around the body? | Which organ pushes blood through the body? | The {a} pumps blood around the body. | heart | 1 | | liver
What is the longest bone in the human body? | Which bone of the human body is the longest? | The {a}, in the thigh, is the longest bone in the human body. | femur | 2 | thighbone | tibia
What is the smallest bone in the human body? | Which bone of the human body is the smallest? | The {a}, in the middle ear, is the smallest bone in the human body. | stapes | 3 | stirrup |
How many teeth does an adult human usually have? | What is the usual number of teeth in an adult human? | An adult human usually has {a} teeth. | 32 | 1 | | 28
Which organs filter the blood to make urine? | Which organs make urine by filtering the blood? | The {a} filter the blood to make urine. | kidneys | 1 | kidney | lungs
What is the largest internal organ of the human body? | Which internal organ of the human body is the biggest? | The {a} is the largest internal organ of the human body. | liver | 2 | | lungs
What is the coloured part of the eye called? | What is the name of the coloured part of the eye? | The coloured part of the eye is called the {a}. | iris | 2 | | pupil
Which protein in red blood cells carries oxygen? | What protein carries oxygen in red blood cells? | The protein {a} carries oxygen in red blood cells. | hemoglobin | 2 | haemoglobin | myoglobin
How many chromosomes does a human cell normally have? | What is the normal number of chromosomes in a human cell? | A normal human cell has {a} chromosomes. | 46 | 2 | | 48
Which vitamin does the skin make in sunlight? | What vitamin is produced by the skin when exposed to sunlight? | The skin makes vitamin {a} when it is exposed to sunlight. | D | 1 | vitamin D | C
Which organ produces insulin? | Which organ of the body makes insulin? | Insulin is produced by the {a}. | pancreas | 2 | | liver
How many chambers does the human heart have? | What is the number of chambers in the human heart? | The human heart has {a} chambers. | 4 | 1 | | 3
Which organ controls the body and the mind? | Which organ is the control centre of the nervous system? | The {a} controls the body and is the centre of the nervous system. | brain | 1 | | spinal cord
Which organ do humans use to breathe? | Which organs take in oxygen when we breathe? | Humans breathe with their {a}. | lungs | 1 | lung | gills
What type of blood cells fight infection? | Which blood cells defend the body against infection? | {A} fight infection in the body. | white blood cells | 1 | white blood cell; leukocytes | red blood cells
What is the name of the muscle below the lungs that helps us breathe? | Which muscle under the lungs controls breathing? | The {a} is the muscle below the lungs that helps us breathe. | diaphragm | 2 | | pectoralis
""",
    "geography": """
What is the largest ocean on Earth? | Which ocean is the biggest on Earth? | The {a} Ocean is the largest ocean on Earth. | Pacific | 1 | Pacific Ocean | Atlantic
What is the highest mountain in the world? | Which mountain is the tallest on Earth? | Mount {a} is the highest mountain in the world. | Everest | 1 | Mount Everest | K2
What is the largest hot desert in the world? | Which hot desert is the biggest in the world? | The {a} is the largest hot desert in the world. | Sahara | 1 | Sahara Desert | Gobi
What is the highest mountain in Africa? | Which mountain is the tallest in Africa? | Mount {a} is the highest mountain in Africa. | Kilimanjaro | 2 | Mount Kilimanjaro | Kenya
What is the longest river in Europe? | Which river in Europe is the longest? | The {a} is the longest river in Europe. | Volga | 3 | |
What is the highest mountain in the Alps? | Which mountain of the Alps is the tallest? | {A} is the highest mountain in the Alps. | Mont Blanc | 2 | | Matterhorn
What is the highest mountain in North America? | Which mountain is the tallest in North America? | {A} is the highest mountain in North America. | Denali | 3 | Mount McKinley |
What is the highest mountain in South America? | Which mountain is the tallest in South America? | {A} is the highest mountain in South America. | Aconcagua | 3 | |
What is the deepest lake in the world? | Which lake is the deepest on Earth? | Lake {a} is the deepest lake in the world. | Baikal | 2 | Lake Baikal | Tanganyika
What is the largest island in the world? | Which island is the biggest on Earth? | {A} is the largest island in the world. | Greenland | 2 | | Borneo
What is the smallest country in the world? | Which country is the smallest in the world by area? | {A} is the smallest country in the world. | Vatican City | 1 | Vatican; Holy See | Monaco
What is the largest country in the world by area? | Which country covers the greatest area? | {A} is the largest country in the world by area. | Russia | 1 | | Canada
Which ocean lies between Europe and North America? | Which ocean separates Europe from North America? | The {a} Ocean lies between Europe and North America. | Atlantic | 1 | Atlantic Ocean | Pacific
What is the largest coral reef system in the world? | Which coral reef system is the biggest on Earth? | The {a} is the largest coral reef system in the world. | Great Barrier Reef | 1 | | Belize Barrier Reef
Which mountain range separates Europe from Asia? | Which mountains form the border between Europe and Asia? | The {a} separate Europe from Asia. | Ural Mountains | 2 | Urals; Ural | Caucasus
Which river flows through the Grand Canyon? | Which river carved the Grand Canyon? | The {a} River flows through the Grand Canyon. | Colorado | 2 | Colorado River | Rio Grande
In which mountain range is Mount Everest? | Which mountain range contains Mount Everest? | Mount Everest is in the {a}. | Himalayas | 1 | Himalaya | Andes
What is the longest mountain range in the world above sea level? | Which continental mountain range is the longest? | The {a} are the longest mountain range above sea level. | Andes | 2 | | Rockies
What is the largest lake in Africa? | Which lake is the biggest in Africa? | Lake {a} is the largest lake in Africa. | Victoria | 2 | Lake Victoria | Tanganyika
Which sea lies between Europe and Africa? | Which sea separates southern Europe from northern Africa? | The {a} Sea lies between Europe and Africa. | Mediterranean | 1 | Mediterranean Sea | Red
Which continent is the coldest? | Which continent has the coldest climate? | {A} is the coldest continent. | Antarctica | 1 | | Asia
Which continent is the largest? | Which continent is the biggest? | {A} is the largest continent. | Asia | 1 | | Africa
What is the second highest mountain in the world? | Which mountain is the second tallest on Earth? | {A} is the second highest mountain in the world. | K2 | 2 | | Kangchenjunga
What is the largest rainforest in the world? | Which rainforest is the biggest on Earth? | The {a} rainforest is the largest rainforest in the world. | Amazon | 1 | | Congo
What is the longest river in Asia? | Which river in Asia is the longest? | The {a} is the longest river in Asia. | Yangtze | 3 | Chang Jiang |
Which strait separates Spain from Morocco? | Which strait lies between Spain and Morocco? | The Strait of {a} separates Spain from Morocco. | Gibraltar | 2 | | Hormuz
What is the capital of the U.S. state of California? | Which city is the capital of California? | {A} is the capital of the U.S. state of California. | Sacramento | 3 | |
What is the capital of the U.S. state of Texas? | Which city is the capital of Texas? | {A} is the capital of the U.S. state of Texas. | Austin | 3 | |
What is the capital of the Australian state of Victoria? | Which city is the capital of Victoria in Australia? | {A} is the capital of the Australian state of Victoria. | Melbourne | 3 | |
""",
    "history": """
In which year did World War II end? | What year did the Second World War end? | World War II ended in {a}. | 1945 | 1 | | 1946
In which year did World War I begin? | What year did the First World War start? | World War I began in {a}. | 1914 | 1 | | 1912
In which year did World War I end? | What year did the First World War end? | World War I ended in {a}. | 1918 | 2 | | 1919
In which year did World War II begin? | What year did the Second World War start? | World War II began in {a}. | 1939 | 1 | | 1938
In which year did humans first land on the Moon? | What year did the Apollo 11 astronauts land on the Moon? | Humans first landed on the Moon in {a}. | 1969 | 1 | | 1968
In which year did the Berlin Wall fall? | What year did the Berlin Wall come down? | The Berlin Wall fell in {a}. | 1989 | 1 | | 1991
In which year did Christopher Columbus first reach the Americas? | What year did Columbus first arrive in the Americas? | Christopher Columbus first reached the Americas in {a}. | 1492 | 1 | | 1498
In which year did the French Revolution begin? | What year did the French Revolution start? | The French Revolution began in {a}. | 1789 | 2 | | 1793
In which year was the United States Declaration of Independence signed? | What year was the American Declaration of Independence adopted? | The United States Declaration of Independence was signed in {a}. | 1776 | 1 | | 1774
In which year did the Titanic sink? | What year did the RMS Titanic sink? | The Titanic sank in {a}. | 1912 | 1 | | 1915
In which year was the Battle of Hastings fought? | What year did the Battle of Hastings take place? | The Battle of Hastings was fought in {a}. | 1066 | 2 | | 1086
In which year was the Magna Carta sealed? | What year was the Magna Carta agreed? | The Magna Carta was sealed in {a}. | 1215 | 2 | | 1225
In which year was the Soviet Union dissolved? | What year did the Soviet Union break up? | The Soviet Union was dissolved in {a}. | 1991 | 2 | | 1989
In which year did the Russian Revolution take place? | What year did the Bolsheviks take power in Russia? | The Russian Revolution took place in {a}. | 1917 | 2 | | 1905
In which year did the American Civil War end? | What year did the American Civil War come to an end? | The American Civil War ended in {a}. | 1865 | 2 | | 1863
In which year was the Battle of Waterloo fought? | What year did the Battle of Waterloo take place? | The Battle of Waterloo was fought in {a}. | 1815 | 2 | | 1812
In which year did Constantinople fall to the Ottomans? | What year was Constantinople conquered by the Ottoman Turks? | Constantinople fell to the Ottomans in {a}. | 1453 | 3 | |
In which year did Martin Luther publish his Ninety-five Theses? | What year did Martin Luther post the Ninety-five Theses? | Martin Luther published his Ninety-five Theses in {a}. | 1517 | 3 | |
In which year did the Wall Street Crash happen? | What year did the great stock market crash on Wall Street take place? | The Wall Street Crash happened in {a}. | 1929 | 2 | | 1933
In which year did the Chernobyl disaster happen? | What year did the Chernobyl nuclear accident occur? | The Chernobyl disaster happened in {a}. | 1986 | 2 | | 1984
In which year did India gain independence from Britain? | What year did India become independent of British rule? | India gained independence from Britain in {a}. | 1947 | 2 | | 1950
In which year was the People's Republic of China founded? | What year was the People's Republic of China proclaimed? | The People's Republic of China was founded in {a}. | 1949 | 3 | |
In which year was Nelson Mandela released from prison? | What year did Nelson Mandela walk free from prison? | Nelson Mandela was released from prison in {a}. | 1990 | 3 | |
In which year did the Great Fire of London happen? | What year did the Great Fire of London break out? | The Great Fire of London happened in {a}. | 1666 | 2 | | 1606
In which year did the attack on Pearl Harbor take place? | What year did Japan attack Pearl Harbor? | The attack on Pearl Harbor took place in {a}. | 1941 | 2 | | 1942
In which year did the D-Day landings take place? | What year did the Allies land in Normandy on D-Day? | The D-Day landings took place in {a}. | 1944 | 2 | | 1943
In which year was Sputnik 1 launched? | What year did the Soviet Union launch Sputnik 1? | Sputnik 1 was launched in {a}. | 1957 | 3 | |
In which year was the Treaty of Versailles signed? | What year was the Treaty of Versailles concluded? | The Treaty of Versailles was signed in {a}. | 1919 | 3 | |
In which year was President John F. Kennedy assassinated? | What year was John F. Kennedy killed? | President John F. Kennedy was assassinated in {a}. | 1963 | 2 | | 1965
In which year did the Wright brothers make their first powered flight? | What year did the Wright brothers first fly? | The Wright brothers made their first powered flight in {a}. | 1903 | 2 | | 1908
In which year did the Western Roman Empire fall? | What year is given for the fall of the Western Roman Empire? | The Western Roman Empire fell in {a}. | 476 | 3 | |
In which year was Charlemagne crowned emperor? | What year did Charlemagne become emperor? | Charlemagne was crowned emperor in the year {a}. | 800 | 3 | |
In which year did the eruption of Mount Vesuvius bury Pompeii? | What year was Pompeii buried by Vesuvius? | The eruption of Mount Vesuvius buried Pompeii in the year {a}. | 79 | 3 | |
In which year did the September 11 attacks take place? | What year did the 9/11 attacks happen? | The September 11 attacks took place in {a}. | 2001 | 1 | | 2002
In which year was Germany reunified? | What year did East and West Germany reunite? | Germany was reunified in {a}. | 1990 | 3 | |
Who was the first President of the United States? | Which man served as the first American president? | {A} was the first President of the United States. | George Washington | 1 | Washington | Thomas Jefferson
Who was President of the United States during the American Civil War? | Which president led the United States during the Civil War? | {A} was President of the United States during the American Civil War. | Abraham Lincoln | 1 | Lincoln | Ulysses S. Grant
Who was Prime Minister of the United Kingdom during most of World War II? | Which British prime minister led the country through most of the Second World War? | {A} was Prime Minister of the United Kingdom during most of World War II. | Winston Churchill | 1 | Churchill | Neville Chamberlain
Who led the Soviet Union during World War II? | Which leader ruled the Soviet Union in the Second World War? | {A} led the Soviet Union during World War II. | Joseph Stalin | 2 | Stalin | Vladimir Lenin
Who was the first Roman emperor? | Which man became the first emperor of Rome? | {A} was the first Roman emperor. | Augustus | 2 | Octavian; Caesar Augustus | Nero
Who was the first emperor of a unified China? | Which ruler first unified China as emperor? | {A} was the first emperor of a unified China. | Qin Shi Huang | 3 | Qin Shi Huangdi; Shi Huangdi |
Who led India's independence movement with nonviolent resistance? | Which leader used nonviolent resistance to lead India to independence? | {A} led India's independence movement with nonviolent resistance. | Mahatma Gandhi | 1 | Gandhi; Mohandas Gandhi | Jawaharlal Nehru
Who was the first female Prime Minister of the United Kingdom? | Which woman first became British prime minister? | {A} was the first female Prime Minister of the United Kingdom. | Margaret Thatcher | 1 | Thatcher | Theresa May
Who was the first person to reach the South Pole? | Which explorer first reached the South Pole? | {A} was the first person to reach the South Pole, in 1911. | Roald Amundsen | 2 | Amundsen | Robert Falcon Scott
Who was the French emperor defeated at the Battle of Waterloo? | Which French emperor lost the Battle of Waterloo? | {A} was the French emperor defeated at the Battle of Waterloo. | Napoleon | 1 | Napoleon Bonaparte; Napoléon | Louis XIV
Who was the first Chancellor of the German Empire? | Which statesman became the first Chancellor of Germany in 1871? | {A} was the first Chancellor of the German Empire. | Otto von Bismarck | 2 | Bismarck | Wilhelm II
Who was the civil rights leader who gave the "I Have a Dream" speech? | Which civil rights leader delivered the "I Have a Dream" speech? | {A} gave the "I Have a Dream" speech in 1963. | Martin Luther King Jr. | 1 | Martin Luther King; MLK | Malcolm X
Who was the queen of ancient Egypt who allied with Mark Antony? | Which Egyptian queen was the ally of Mark Antony? | {A} was the queen of ancient Egypt who allied with Mark Antony. | Cleopatra | 1 | Cleopatra VII | Nefertiti
Who was the Mongol leader who founded the Mongol Empire? | Which Mongol ruler founded the Mongol Empire? | {A} founded the Mongol Empire. | Genghis Khan | 1 | Chinggis Khan | Kublai Khan
""",
    "sports": """
How many players does a soccer team have on the field? | How many players from one football team are on the pitch at a time? | A soccer team has {a} players on the field. | 11 | 1 | | 10
How many players does a basketball team have on the court? | How many players from one basketball team are on the court at a time? | A basketball team has {a} players on the court. | 5 | 1 | | 6
How many players does a volleyball team have on the court? | How many players from one volleyball team are on the court at a time? | A volleyball team has {a} players on the court. | 6 | 2 | | 7
How many players does a baseball team have on the field? | How many players from one baseball team are on the field at a time? | A baseball team has {a} players on the field. | 9 | 2 | | 11
How many players does a rugby union team have on the field? | How many players from one rugby union team are on the pitch at a time? | A rugby union team has {a} players on the field. | 15 | 3 | |
How often are the Summer Olympic Games held? | Every how many years do the Summer Olympics take place? | The Summer Olympic Games are held every {a} years. | 4 | 1 | four years | 2
How many rings are on the Olympic flag? | What is the number of rings on the Olympic flag? | The Olympic flag has {a} rings. | 5 | 1 | | 6
How many squares are on a chessboard? | What is the number of squares on a chessboard? | A chessboard has {a} squares. | 64 | 1 | | 81
How many holes are played in a standard round of golf? | What is the number of holes in a standard round of golf? | A standard round of golf has {a} holes. | 18 | 1 | | 12
How many points is a touchdown worth in American football? | What is the number of points scored for a touchdown? | A touchdown in American football is worth {a} points. | 6 | 2 | | 7
What is the maximum break in snooker? | What is the highest possible break in snooker? | The maximum break in snooker is {a}. | 147 | 3 | |
What is a perfect score in ten-pin bowling? | What is the highest possible score in a game of ten-pin bowling? | A perfect score in ten-pin bowling is {a}. | 300 | 2 | | 250
In which sport is the Stanley Cup awarded? | Which sport's champions win the Stanley Cup? | The Stanley Cup is awarded in {a}. | ice hockey | 2 | hockey | basketball
In which sport is the Ashes series played? | Which sport is played in the Ashes series? | The Ashes series is played in {a}. | cricket | 2 | | rugby
In which sport is Wimbledon a championship? | Which sport is played at Wimbledon? | Wimbledon is a championship in {a}. | tennis | 1 | | golf
In which sport is the Tour de France raced? | Which sport is the Tour de France? | The Tour de France is a race in {a}. | cycling | 1 | | running
In which sport is the Super Bowl played? | Which sport's championship game is the Super Bowl? | The Super Bowl is the championship game of {a}. | American football | 1 | football; NFL | baseball
In which sport is the Ryder Cup contested? | Which sport is played in the Ryder Cup? | The Ryder Cup is contested in {a}. | golf | 2 | | tennis
Which country has won the most FIFA World Cups? | Which nation holds the record for most World Cup titles? | {A} has won the most FIFA World Cups. | Brazil | 2 | | Germany
In which city were the first modern Olympic Games held? | Which city hosted the first modern Olympics? | The first modern Olympic Games were held in {a}. | Athens | 2 | | Paris
""",
    "math_units": """
How many degrees are in a full circle? | What is the number of degrees in a circle? | A full circle has {a} degrees. | 360 | 1 | | 180
How many degrees are in a right angle? | What is the size of a right angle in degrees? | A right angle measures {a} degrees. | 90 | 1 | | 45
What is the sum of the angles in a triangle? | How many degrees do the angles of a triangle add up to? | The angles in a triangle add up to {a} degrees. | 180 | 1 | | 360
What is the square root of 144? | Which number multiplied by itself gives 144? | The square root of 144 is {a}. | 12 | 1 | | 14
What is the smallest prime number? | Which prime number is the smallest? | The smallest prime number is {a}. | 2 | 2 | | 3
How many sides does a hexagon have? | What is the number of sides of a hexagon? | A hexagon has {a} sides. | 6 | 1 | | 8
How many sides does a pentagon have? | What is the number of sides of a pentagon? | A pentagon has {a} sides. | 5 | 1 | | 6
How many sides does an octagon have? | What is the number of sides of an octagon? | An octagon has {a} sides. | 8 | 1 | | 10
How many sides does a triangle have? | What is the number of sides of a triangle? | A triangle has {a} sides. | 3 | 1 | | 4
How many faces does a cube have? | What is the number of faces of a cube? | A cube has {a} faces. | 6 | 1 | | 8
How many edges does a cube have? | What is the number of edges of a cube? | A cube has {a} edges. | 12 | 2 | | 8
What is the value of pi to two decimal places? | What is pi rounded to two decimal places? | The value of pi to two decimal places is {a}. | 3.14 | 1 | | 3.41
What is the square root of 81? | Which number multiplied by itself gives 81? | The square root of 81 is {a}. | 9 | 1 | | 8
What is 7 times 8? | What do you get when you multiply 7 by 8? | 7 times 8 is {a}. | 56 | 1 | | 54
How many centimetres are in a metre? | What is the number of centimetres in one metre? | There are {a} centimetres in a metre. | 100 | 1 | | 1000
How many grams are in a kilogram? | What is the number of grams in one kilogram? | There are {a} grams in a kilogram. | 1000 | 1 | | 100
How many metres are in a kilometre? | What is the number of metres in one kilometre? | There are {a} metres in a kilometre. | 1000 | 1 | | 100
How many inches are in a foot? | What is the number of inches in one foot? | There are {a} inches in a foot. | 12 | 1 | | 10
How many feet are in a yard? | What is the number of feet in one yard? | There are {a} feet in a yard. | 3 | 2 | | 4
How many ounces are in a pound? | What is the number of ounces in one pound? | There are {a} ounces in a pound. | 16 | 2 | | 12
How many seconds are in a minute? | What is the number of seconds in one minute? | There are {a} seconds in a minute. | 60 | 1 | | 100
How many minutes are in an hour? | What is the number of minutes in one hour? | There are {a} minutes in an hour. | 60 | 1 | | 100
How many hours are in a day? | What is the number of hours in one day? | There are {a} hours in a day. | 24 | 1 | | 12
How many days are in a week? | What is the number of days in one week? | There are {a} days in a week. | 7 | 1 | | 5
How many days are in a leap year? | What is the number of days in a leap year? | A leap year has {a} days. | 366 | 1 | | 365
How many months are in a year? | What is the number of months in one year? | There are {a} months in a year. | 12 | 1 | | 10
How many years are in a century? | What is the number of years in one century? | There are {a} years in a century. | 100 | 1 | | 1000
How many years are in a decade? | What is the number of years in one decade? | There are {a} years in a decade. | 10 | 1 | | 12
At what temperature in degrees Celsius does water boil at sea level? | What is the boiling point of water at sea level in degrees Celsius? | At sea level, water boils at {a} degrees Celsius. | 100 | 1 | | 90
At what temperature in degrees Celsius does water freeze? | What is the freezing point of water in degrees Celsius? | Water freezes at {a} degrees Celsius. | 0 | 1 | zero | 4
What is the chemical formula of water? | Which chemical formula describes water? | The chemical formula of water is {a}. | H2O | 1 | | H2O2
What is the chemical formula of table salt? | Which chemical formula describes sodium chloride? | Table salt is sodium chloride, with the chemical formula {a}. | NaCl | 2 | | KCl
What is the most abundant gas in Earth's atmosphere? | Which gas makes up most of the air on Earth? | {A} is the most abundant gas in Earth's atmosphere. | nitrogen | 2 | | oxygen
What is the hardest natural substance? | Which natural material is the hardest? | {A} is the hardest natural substance. | diamond | 1 | | quartz
What is the speed of light in a vacuum, in kilometres per second, approximately? | About how many kilometres per second does light travel in a vacuum? | Light travels at approximately {a} kilometres per second in a vacuum. | 300000 | 2 | 300,000; 299792; 299,792 | 150000
Which metal is liquid at room temperature? | Which metal is a liquid at ordinary room temperature? | {A} is the metal that is liquid at room temperature. | mercury | 1 | | lead
""",
}
