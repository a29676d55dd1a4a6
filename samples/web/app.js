// Runs the converted model in the page with LiteRT.js: pick an image (file, camera or example), see the
// top-5 classes and the latency, on WebAssembly or WebGPU. serve.py tells the page which model to load
// (/config.json).
import {loadLiteRt, loadAndCompile, Tensor} from '@litertjs/core';

const $ = (id) => document.getElementById(id);
const status = (text) => { $('status').textContent = text; };

let model, labels, inputShape, accelerator;

// The accelerator LiteRT.js runs the model on: 'wasm' (the CPU, XNNPACK) unless the page was opened with
// ?accelerator=webgpu (the menu does that) in a browser that offers WebGPU.
function chosenAccelerator() {
  const asked = new URLSearchParams(location.search).get('accelerator');
  return asked === 'webgpu' && navigator.gpu ? 'webgpu' : 'wasm';
}

function offerAccelerators() {
  const menu = $('accelerator');
  menu.value = accelerator;
  menu.querySelector('option[value="webgpu"]').disabled = !navigator.gpu;
  menu.addEventListener('change', () => {
    const url = new URL(location.href);
    url.searchParams.set('accelerator', menu.value);
    location.assign(url);
  });
}

async function setup() {
  accelerator = chosenAccelerator();
  offerAccelerators();
  const config = await (await fetch('/config.json')).json();
  await loadLiteRt('/vendor/@litertjs/core/wasm/');
  model = await loadAndCompile(config.model, {accelerator});
  labels = await (await fetch(config.labels)).json();
  inputShape = Array.from(model.getInputDetails()[0].shape);
  const [, height, width, channels] = inputShape;
  if (inputShape.length !== 4 || channels !== 3) {
    throw new Error(`expected one NHWC RGB image input, found shape [${inputShape}] ` +
                    '(convert with --channel-last-io)');
  }
  $('model-name').textContent = `${config.name} (input ${width}×${height} RGB, ${labels.length} classes)`;
  $('runtime').textContent = accelerator === 'webgpu' ? 'WebGPU' : 'WebAssembly (XNNPACK)';
  for (const url of config.examples) {
    const button = document.createElement('button');
    button.type = 'button';
    button.textContent = url.split('/').pop().replace(/\.\w+$/, '');
    button.addEventListener('click', () => classifyUrl(url));
    $('examples').append(button);
  }
  await run(new Float32Array(height * width * 3));  // warm-up: the first run prepares the kernels
  if (navigator.mediaDevices && navigator.mediaDevices.getUserMedia) $('camera-button').hidden = false;
  status('Ready. Choose an image.');
  document.body.dataset.state = 'ready';
}

// NHWC float32 in [0, 1] from anything drawable; drawn 1:1 when it already has the model's size.
function pixels(source, sourceWidth, sourceHeight) {
  const [, height, width] = inputShape;
  const canvas = document.createElement('canvas');
  canvas.width = width;
  canvas.height = height;
  const context = canvas.getContext('2d', {willReadFrequently: true});
  context.drawImage(source, 0, 0, sourceWidth, sourceHeight, 0, 0, width, height);
  const rgba = context.getImageData(0, 0, width, height).data;
  const data = new Float32Array(width * height * 3);
  for (let i = 0, j = 0; i < rgba.length; i += 4, j += 3) {
    data[j] = rgba[i] / 255;
    data[j + 1] = rgba[i + 1] / 255;
    data[j + 2] = rgba[i + 2] / 255;
  }
  const preview = $('preview').getContext('2d');
  preview.imageSmoothingEnabled = false;
  preview.drawImage(source, 0, 0, sourceWidth, sourceHeight, 0, 0, $('preview').width, $('preview').height);
  return data;
}

async function run(data) {
  const input = new Tensor(data, inputShape);
  const start = performance.now();
  const outputs = await model.run(input);
  // On WebGPU the scores come back in a GPU buffer: moved to the CPU side (a copy) to be read.
  const ranOn = outputs[0].accelerator;
  const readable = ranOn === 'wasm' ? outputs[0] : await outputs[0].moveTo('wasm');
  const scores = Array.from(readable.toTypedArray());
  const latencyMs = performance.now() - start;
  input.delete();
  if (readable !== outputs[0]) readable.delete();
  for (const t of outputs) t.delete();
  return {scores, latencyMs, ranOn};
}

function show({scores, latencyMs, ranOn}) {
  const top5 = scores.map((score, index) => ({label: labels[index] ?? `class ${index}`, score}))
      .sort((a, b) => b.score - a.score).slice(0, 5);
  $('top5').replaceChildren(...top5.map(({label, score}) => {
    const item = document.createElement('li');
    const name = document.createElement('span');
    name.className = 'label';
    name.textContent = label;
    const bar = document.createElement('div');
    bar.className = 'bar';
    const fill = document.createElement('span');
    fill.style.width = `${Math.max(0, Math.min(1, score)) * 100}%`;
    bar.append(fill);
    const value = document.createElement('span');
    value.className = 'score';
    value.textContent = score.toFixed(3);
    item.append(name, bar, value);
    return item;
  }));
  $('latency').textContent = `latency: ${latencyMs.toFixed(2)} ms`;
  window.lastResult = {scores, top5, latencyMs, accelerator: ranOn};
  document.body.dataset.state = 'done';
}

async function classify(source, width, height, name) {
  document.body.dataset.state = 'running';
  try {
    show(await run(pixels(source, width, height)));
    status(`Classified ${name}.`);
  } catch (error) {
    status(`Could not classify ${name}: ${error.message}`);
    document.body.dataset.state = 'error';
  }
}

function classifyUrl(url) {
  const image = new Image();
  image.onload = () => classify(image, image.naturalWidth, image.naturalHeight, url.split('/').pop());
  image.onerror = () => status(`Could not read ${url} as an image.`);
  image.src = url;
}

$('file').addEventListener('change', (event) => {
  const file = event.target.files[0];
  if (!file) return;
  const url = URL.createObjectURL(file);
  const image = new Image();
  image.onload = () => {
    classify(image, image.naturalWidth, image.naturalHeight, file.name);
    URL.revokeObjectURL(url);
  };
  image.onerror = () => status(`${file.name} is not an image this browser can read.`);
  image.src = url;
});

$('camera-button').addEventListener('click', async () => {
  try {
    const stream = await navigator.mediaDevices.getUserMedia({video: {facingMode: 'environment'}});
    const video = $('camera');
    video.srcObject = stream;
    video.hidden = false;
    $('snap').hidden = false;
    await video.play();
  } catch (error) {
    status(`No camera: ${error.message}`);
  }
});

$('snap').addEventListener('click', () => {
  const video = $('camera');
  const side = Math.min(video.videoWidth, video.videoHeight);
  const canvas = document.createElement('canvas');
  canvas.width = canvas.height = side;
  canvas.getContext('2d').drawImage(video, (video.videoWidth - side) / 2, (video.videoHeight - side) / 2, side,
                                    side, 0, 0, side, side);
  classify(canvas, side, side, 'the camera frame');
});

setup().catch((error) => {
  status(`Could not start: ${error.message}`);
  document.body.dataset.state = 'error';
  console.error(error);
});
